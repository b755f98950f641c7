package shaping

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
)

// carryOver copies each downstream's lasting state (keys.LegacyDownstream:
// runtime state, breaker, announced limit, quotas) from the key layout
// before its keys took the queue's hash tag, where a key of the new
// layout does not exist yet, keeping its TTL. The old keys stay as they
// were (a process of the earlier version may still read them); nothing
// reads them here. One pipelined DUMP per key when there is nothing to
// carry.
func carryOver(ctx context.Context, rdb redis.UniversalClient, space keys.Space, dss []Downstream) (int, error) {
	var moves []keys.Moved
	for _, ds := range dss {
		shapes := make([]string, 0, len(ds.Quotas))
		for _, q := range ds.Quotas {
			shapes = append(shapes, q.Shape())
		}
		moves = append(moves, space.LegacyDownstream(ds.Name, shapes...)...)
	}
	pipe := rdb.Pipeline()
	dumps := make([]*redis.StringCmd, len(moves))
	ttls := make([]*redis.DurationCmd, len(moves))
	for i, m := range moves {
		dumps[i], ttls[i] = pipe.Dump(ctx, m.Old), pipe.PTTL(ctx, m.Old)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	pipe = rdb.Pipeline()
	var restores []*redis.StatusCmd
	for i, m := range moves {
		blob, err := dumps[i].Result()
		if err != nil {
			continue // absent
		}
		ttl := ttls[i].Val() // go-redis: -1 no TTL, -2 no key
		if ttl == -2 {
			continue // expired between the two reads
		}
		restores = append(restores, pipe.Restore(ctx, m.New, max(ttl, 0), blob))
	}
	if len(restores) == 0 {
		return 0, nil
	}
	_, _ = pipe.Exec(ctx)
	n := 0
	for _, c := range restores {
		switch err := c.Err(); {
		case err == nil:
			n++
		case strings.HasPrefix(err.Error(), "BUSYKEY"):
			// written in the new layout already: that state is newer
		default:
			return n, err
		}
	}
	return n, nil
}
