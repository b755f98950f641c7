package app

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// quietRecovererRaces lowers to debug asynq's recoverer warnings about a
// task that is no longer where the recoverer looked ("NOT FOUND"): with
// several processes, each recoverer lists the same expired leases and all
// but the first find the task already moved. That is expected, not a
// problem an operator should chase.
type quietRecovererRaces struct{ slog.Handler }

func (h quietRecovererRaces) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && strings.HasPrefix(r.Message, "recoverer: could not ") && strings.HasSuffix(r.Message, "NOT FOUND") {
		if !h.Handler.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		r.Level = slog.LevelDebug
	}
	return h.Handler.Handle(ctx, r)
}

func (h quietRecovererRaces) WithAttrs(as []slog.Attr) slog.Handler {
	return quietRecovererRaces{h.Handler.WithAttrs(as)}
}

func (h quietRecovererRaces) WithGroup(name string) slog.Handler {
	return quietRecovererRaces{h.Handler.WithGroup(name)}
}

// redisLogger sends go-redis's own log lines (dial failures, pool
// notices), which it otherwise prints as plain text on stderr, into the
// structured log.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, args ...any) {
	r.l.WarnContext(ctx, strings.TrimPrefix(fmt.Sprintf(format, args...), "redis: "), "component", "go-redis")
}

// useLogger routes go-redis's log (a process-wide setting) through log and
// returns log with asynq's expected recoverer races quietened and the
// warnings of an unreachable Redis folded (foldRedisDown).
func useLogger(log *slog.Logger) *slog.Logger {
	fold := &redisDown{every: redisDownEvery}
	folded := slog.New(foldRedisDown{Handler: quietRecovererRaces{log.Handler()}, s: fold})
	redis.SetLogger(redisLogger{folded})
	return folded
}

// redisDownEvery spaces the warnings that say Redis cannot be reached.
const redisDownEvery = 10 * time.Second

// redisDown is the state foldRedisDown shares between its handlers.
type redisDown struct {
	every  time.Duration
	mu     sync.Mutex
	last   time.Time
	folded int
}

// pass reports whether a Redis-unreachable warning at now is logged, and
// how many were folded since the last one. A go-redis pool line (quiet)
// is always folded: shaper's own say which Redis and what for.
func (s *redisDown) pass(now time.Time, quiet bool) (bool, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if quiet || (!s.last.IsZero() && now.Sub(s.last) < s.every) {
		s.folded++
		return false, 0
	}
	n := s.folded
	s.last, s.folded = now, 0
	return true, n
}

// foldRedisDown lets one warning whose cause is an unreachable Redis (a
// refused or timed-out dial, from go-redis, asynq or shaper's own loops)
// through every redisDownEvery, with how many it folded: with Redis away
// every loop fails at once, and one line says it.
type foldRedisDown struct {
	slog.Handler
	s *redisDown
}

func (h foldRedisDown) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && unreachable(r) {
		ok, n := h.s.pass(r.Time, fromGoRedis(r))
		if !ok {
			return nil
		}
		if n > 0 {
			r = r.Clone()
			r.AddAttrs(slog.Int("similar_folded", n))
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h foldRedisDown) WithAttrs(as []slog.Attr) slog.Handler {
	return foldRedisDown{h.Handler.WithAttrs(as), h.s}
}

func (h foldRedisDown) WithGroup(name string) slog.Handler {
	return foldRedisDown{h.Handler.WithGroup(name), h.s}
}

// fromGoRedis reports whether r is a line of go-redis's own log.
func fromGoRedis(r slog.Record) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		found = a.Key == "component" && a.Value.String() == "go-redis"
		return !found
	})
	return found
}

// unreachable reports whether r's message or an attribute says a dial to
// Redis failed.
func unreachable(r slog.Record) bool {
	is := func(s string) bool {
		return strings.Contains(s, "dial tcp") || strings.Contains(s, "connection refused") ||
			strings.Contains(s, "TLS handshake")
	}
	found := is(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		if !found && is(a.Value.String()) {
			found = true
		}
		return !found
	})
	return found
}
