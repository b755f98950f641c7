package shaping

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
)

// upgradeLayout carries the downstreams' lasting state over from the
// earlier key layout, and warns when a process of that layout is
// releasing them (it reserves on a bucket of its own).
func upgradeLayout(rdb redis.UniversalClient, space keys.Space, dss []Downstream, timeout time.Duration, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if n, err := carryOver(ctx, rdb, space, dss); err != nil {
		log.Warn("shaping: cannot carry the downstreams' state over from the earlier key layout", "err", err)
	} else if n > 0 {
		log.Info("shaping: carried the downstreams' state over from the earlier key layout", "keys", n)
	}
	if names, err := legacyReleasing(ctx, rdb, space, dss); err == nil && len(names) > 0 {
		log.Warn("shaping: the earlier key layout's bucket of these downstreams is in use: a shaper process of that version may be releasing them on a bucket and quotas of its own; stop it, or the fleet may release up to twice their rate",
			"downstreams", names)
	}
}

// carryOver copies each downstream's lasting state (keys.LegacyDownstream:
// runtime state, breaker, bucket, announced limit, quotas) from the key layout
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

// legacyReleasing names the downstreams of dss whose bucket in the earlier
// key layout exists (keys.LegacyBucket): a process of that version is
// releasing them now, on a bucket and quotas of its own, so the fleet may
// release up to twice the rate until it stops. One pipelined EXISTS per
// downstream.
func legacyReleasing(ctx context.Context, rdb redis.UniversalClient, space keys.Space, dss []Downstream) ([]string, error) {
	pipe := rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(dss))
	for i, ds := range dss {
		cmds[i] = pipe.Exists(ctx, space.LegacyBucket(ds.Name))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	var out []string
	for i, c := range cmds {
		if c.Val() > 0 {
			out = append(out, dss[i].Name)
		}
	}
	return out, nil
}
