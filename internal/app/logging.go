package app

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

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
// returns log with asynq's expected recoverer races quietened.
func useLogger(log *slog.Logger) *slog.Logger {
	redis.SetLogger(redisLogger{log})
	return slog.New(quietRecovererRaces{log.Handler()})
}
