package app

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/redisconn"
)

// OpenRedis connects as o says (see redisconn.Open) or, when o names no
// Redis, starts an embedded in-process one (for trying shaper out on one
// machine; its state dies with the process). The returned close func
// closes the client and the embedded server.
func OpenRedis(o redisconn.Options) (redis.UniversalClient, func(), error) {
	if !o.Embedded() {
		return redisconn.Open(o)
	}
	addr, stop, err := StartEmbedded()
	if err != nil {
		return nil, nil, err
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	return c, func() { c.Close(); stop() }, nil
}

// StartEmbedded starts an in-process Redis (miniredis) for the quick start
// and single-process trials, and moves its clock forward once a second:
// miniredis expires keys only when its clock moves. Never for tests that
// check correctness: those run on a real redis-server.
func StartEmbedded() (addr string, stop func(), err error) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		return "", nil, fmt.Errorf("embedded redis: %w", err)
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				mr.FastForward(time.Second)
			case <-done:
				return
			}
		}
	}()
	return mr.Addr(), func() { close(done); mr.Close() }, nil
}

// Ping checks Redis within d.
func Ping(rdb redis.UniversalClient, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return rdb.Ping(ctx).Err()
}
