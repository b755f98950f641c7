package app

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/testutil"
)

func TestRecovererRaceIsNotAWarning(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf bytes.Buffer
		log := slog.New(quietRecovererRaces{slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: level})}).With("downstream", "api")
		log.Warn("recoverer: could not retry lease expired task: INTERNAL_ERROR: redis eval error: NOT FOUND")
		log.Warn("recoverer: could not move task to archive: INTERNAL_ERROR: redis eval error: NOT FOUND")
		log.Warn("recoverer: could not list lease expired tasks: cannot decode message")
		out := buf.String()
		if n := strings.Count(out, `"level":"WARN"`); n != 1 || !strings.Contains(out, "cannot decode message") {
			t.Errorf("level %v: log\n%s\nwant one WARN, the decode failure", level, out)
		}
		wantDebug := 0
		if level == slog.LevelDebug {
			wantDebug = 2
		}
		if n := strings.Count(out, `"level":"DEBUG"`); n != wantDebug {
			t.Errorf("level %v: %d DEBUG lines, want %d (the NOT FOUND races)\n%s", level, n, wantDebug, out)
		}
		if !strings.Contains(out, `"downstream":"api"`) {
			t.Errorf("level %v: attrs lost: %s", level, out)
		}
	}
}

// With Redis unreachable, go-redis's own dial failures and every loop's
// warnings fold into one structured line per redisDownEvery, which says
// how many it folded.
func TestRedisDownWarningsFolded(t *testing.T) {
	var buf testutil.SyncBuffer // go-redis logs from any goroutine
	log := useLogger(slog.New(slog.NewJSONHandler(&buf, nil)))
	t.Cleanup(func() { useLogger(slog.New(slog.NewJSONHandler(io.Discard, nil))) })
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialerRetries: 1, MaxRetries: -1})
	defer c.Close()
	for range 12 * 10 { // enough failed dials for the pool to log
		if c.Ping(context.Background()).Err() == nil {
			t.Fatal("ping to port 1 succeeded")
		}
	}
	log.Warn("redis is not answering yet", "err", "dial tcp 127.0.0.1:1: connect: connection refused")
	log.Warn("take: take failed", "err", "dial tcp 127.0.0.1:1: connect: connection refused")
	log.Warn("something else")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2 (one for Redis down, the unrelated one):\n%s", len(lines), buf.String())
	}
	if !strings.HasPrefix(lines[0], `{"time":`) || !strings.Contains(lines[0], "redis is not answering yet") ||
		!strings.Contains(lines[0], `"similar_folded":`) {
		t.Errorf("first line %q, want the shaper warning in JSON with the go-redis lines folded into it", lines[0])
	}
	if !strings.Contains(lines[1], "something else") {
		t.Errorf("second line %q, want the unrelated warning", lines[1])
	}
}
