package shaping

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// asynqLogEvery bounds how often one kind of asynq warning or error is
// logged: with Redis unreachable, asynq's servers (one per downstream)
// each log a dequeue and a forwarder error per poll, about ten lines a
// second; one line per kind per interval, with the count left out, says
// the same.
const asynqLogEvery = 30 * time.Second

// asynqLogger adapts slog to asynq.Logger; warnings and errors go through
// t.
type asynqLogger struct {
	l *slog.Logger
	t *logThrottle
}

func (a asynqLogger) Debug(args ...any) { a.l.Debug(fmt.Sprint(args...)) }
func (a asynqLogger) Info(args ...any)  { a.l.Info(fmt.Sprint(args...)) }
func (a asynqLogger) Warn(args ...any)  { a.t.log(a.l, slog.LevelWarn, fmt.Sprint(args...)) }
func (a asynqLogger) Error(args ...any) { a.t.log(a.l, slog.LevelError, fmt.Sprint(args...)) }
func (a asynqLogger) Fatal(args ...any) { a.t.log(a.l, slog.LevelError, fmt.Sprint(args...)) }

// logThrottle logs one message of a kind (its text up to the first colon:
// asynq's "Dequeue error", "Failed to forward scheduled tasks") per every,
// counting what it left out.
type logThrottle struct {
	every   time.Duration
	mu      sync.Mutex
	last    map[string]time.Time
	dropped map[string]int
}

func (t *logThrottle) log(l *slog.Logger, level slog.Level, msg string) {
	if t == nil {
		l.Log(nil, level, msg)
		return
	}
	kind, _, _ := strings.Cut(msg, ":")
	now := time.Now()
	t.mu.Lock()
	if now.Sub(t.last[kind]) < t.every {
		t.dropped[kind]++
		t.mu.Unlock()
		return
	}
	n := t.dropped[kind]
	t.last[kind], t.dropped[kind] = now, 0
	t.mu.Unlock()
	if n > 0 {
		l.Log(nil, level, msg, "repeated", n, "in", t.every.String())
		return
	}
	l.Log(nil, level, msg)
}
