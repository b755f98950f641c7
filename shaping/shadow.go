package shaping

import (
	"context"
	"errors"
	"time"

	"github.com/shaper-io/shaper/limiters"
)

// inShadow reports whether the downstream's shaping runs in shadow now.
func (r *runner) inShadow() bool {
	switch r.applied.mode.Load() {
	case modeShadow:
		return true
	case modeEnforce:
		return false
	}
	return r.ds.ShapingMode == limiters.Shadow
}

// shadowSlot is acquire in shadow mode: the task reserves its slot as
// enforcing would, with no bound on the wait (enforced, a task that finds
// the bucket full waits in the queue and reserves later; the unbounded
// reservation is that wait too), the wait is recorded as the one it would
// have had, and the task is released at once. Redis errors are retried
// (shaping fails closed, in shadow too), and a breaker holds as in
// enforce mode: it guards the downstream, not its rate.
func (r *runner) shadowSlot(ctx context.Context, cost int64) (Reservation, brkToken, error) {
	backoff := 50 * time.Millisecond
	for {
		g := r.releaseGate()
		if !g.ok {
			if !r.await(ctx, g) {
				if ctx.Err() != nil {
					return Reservation{}, brkToken{}, ctx.Err()
				}
				return Reservation{}, brkToken{}, errStopping
			}
			continue
		}
		seq := g.seq
		rctx, cancel := context.WithTimeout(ctx, r.d.cfg.RedisTimeout)
		res, err := r.d.buckets.Reserve(rctx, r.bucket(), cost, -1)
		cancel()
		if errors.Is(err, limiters.ErrCostExceedsCapacity) {
			return Reservation{}, brkToken{}, err
		}
		if err != nil {
			if !r.sleep(ctx, backoff) {
				return Reservation{}, brkToken{}, errStopping
			}
			backoff = min(backoff*2, 2*time.Second)
			continue
		}
		if m := r.d.m; m != nil {
			m.ShadowWait.WithLabelValues(r.ds.Name).Observe(res.Wait.Seconds())
		}
		var tok brkToken
		if r.brk != nil {
			var ok bool
			if tok, ok = r.brk.claim(seq); !ok {
				continue // the breaker moved meanwhile: ask it again
			}
		}
		inLine(ctx) // its slot is decided: the next task of its take may ask
		return Reservation{OK: true, Count: 1, Now: res.Now}, tok, nil
	}
}

// slot is the task's slot: acquire's, or shadowSlot's in shadow mode.
func (r *runner) slot(ctx context.Context, cost int64, key string, front bool) (Reservation, brkToken, error) {
	if r.inShadow() {
		return r.shadowSlot(ctx, cost)
	}
	return r.acquire(ctx, cost, key, front)
}
