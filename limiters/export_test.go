package limiters

import (
	"context"
	"time"
)

// AllowAt is Allow at an explicit time instead of the Redis clock, for this
// package's step tests (they drive time; production decides on Redis TIME).
func (l *Redis) AllowAt(ctx context.Context, now time.Time, key string, cost int64) (Result, error) {
	return l.allow(ctx, key, cost, now.UnixMicro())
}
