package shaping

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// With Redis unreachable, asynq logs the same errors at every poll of
// every server: one line per kind reaches the log per interval.
func TestAsynqLogThrottle(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, nil))
	th := &logThrottle{every: time.Hour, last: map[string]time.Time{}, dropped: map[string]int{}}
	a, b := asynqLogger{l: l.With("downstream", "a"), t: th}, asynqLogger{l: l.With("downstream", "b"), t: th}
	for range 40 {
		a.Error("Dequeue error: dial tcp 127.0.0.1:1: connect: connection refused")
		b.Error("Dequeue error: dial tcp 127.0.0.1:1: connect: connection refused")
		a.Warn("Failed to forward scheduled tasks: dial tcp 127.0.0.1:1: connect: connection refused")
	}
	if n := strings.Count(buf.String(), "\n"); n != 2 {
		t.Errorf("%d lines for 120 repeated errors of 2 kinds, want 2:\n%s", n, buf.String())
	}
	th.last["Dequeue error"] = time.Time{} // the interval passed
	a.Error("Dequeue error: again")
	if !strings.Contains(buf.String(), "repeated=79") {
		t.Errorf("the next line does not count the 79 left out:\n%s", buf.String())
	}
}
