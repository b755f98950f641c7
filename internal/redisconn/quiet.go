package redisconn

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Quiet drops go-redis's own log lines (failed dials, pool notices) for
// the whole process: a command-line tool reports a Redis error in its own
// one line instead. The daemon logs them its own way.
func Quiet() { redis.SetLogger(quietLogger{}) }

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
