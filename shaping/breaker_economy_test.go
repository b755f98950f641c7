package shaping_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// releaseCommands drains n tasks through three dispatchers (default
// workers, a handler that succeeds) at 50/s, with or without a breaker,
// and returns the Redis commands per released task (INFO commandstats,
// script-internal commands included) and the script calls per task.
func releaseCommands(t *testing.T, rdb *redis.Client, prefix string, n int, brk *shaping.Breaker) (per, scripts float64) {
	t.Helper()
	ctx := context.Background()
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix})
	for i := range n {
		if _, err := p.Enqueue(ctx, queue.Task{Downstream: "api", Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	var done atomic.Int64
	h := func(context.Context, *shaping.Task) error { done.Add(1); return nil }
	before, err := redistest.ReadCommandStats(ctx, rdb)
	must(t, err)
	var ds []*shaping.Dispatcher
	for range 3 {
		d := shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ShutdownTimeout: 5 * time.Second})
		must(t, d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(50), Handler: h, Breaker: brk}))
		must(t, d.Start())
		ds = append(ds, d)
	}
	waitFor(t, 30*time.Second, fmt.Sprintf("%d releases", n), func() bool { return done.Load() >= int64(n) })
	for _, d := range ds {
		must(t, d.Shutdown(ctx))
	}
	after, err := redistest.ReadCommandStats(ctx, rdb)
	must(t, err)
	d := after.Sub(before)
	d["info"]-- // the first read
	return float64(d.Total()) / float64(n), float64(d["evalsha"]+d["eval"]) / float64(n)
}

// The breaker costs the release path little: outcomes go in batches (about
// one script call a second per process while the downstream is healthy)
// and the lane's gate reads a local mirror, so a release with the breaker
// on costs at most one Redis command more than with it off. A run's count
// varies by about a command per release with timing (how many slots each
// reservation takes, asynq's timed background work), so off and on run
// three times, interleaved, and their means are compared (with two, the
// means once differed by 1.05 in the full suite: run 0 off 19.10, run 1
// off 19.83).
func TestBreakerCommandsPerRelease(t *testing.T) {
	rdb := ownRedis(t)
	const n = 300
	var off, on, offScripts, onScripts float64
	const runs = 3
	for i := range runs {
		c, s := releaseCommands(t, rdb, fmt.Sprint("off", i), n, nil)
		off, offScripts = off+c/runs, offScripts+s/runs
		t.Logf("run %d, breaker off: %.2f commands and %.3f script calls per release", i, c, s)
		c, s = releaseCommands(t, rdb, fmt.Sprint("on", i), n, &shaping.Breaker{})
		on, onScripts = on+c/runs, onScripts+s/runs
		t.Logf("run %d, breaker on: %.2f commands and %.3f script calls per release", i, c, s)
	}
	t.Logf("%d releases at 50/s over 3 dispatchers, mean of %d runs: %.2f Redis commands per release with the breaker off, %.2f with it on (script calls %.3f and %.3f per release)",
		n, runs, off, on, offScripts, onScripts)
	if on > off+1 {
		t.Errorf("%.2f commands per release with the breaker, %.2f without: want at most one more", on, off)
	}
}
