package shaping

import (
	"context"
	"errors"
	"time"

	"github.com/shaper-io/shaper/limiters"
)

// SetMode sets, in every process, the mode of ds's shaping (limiter "")
// or of its admission limiter called limiter: producers and dispatchers
// read it on their next control tick (within a second). It overrides the
// mode the configuration gives until ClearMode.
func (c *Control) SetMode(ctx context.Context, ds, limiter string, m limiters.Mode) error {
	return c.st.SetMode(ctx, ds, limiter, m)
}

// ClearMode removes a mode SetMode set: back to the configured one.
func (c *Control) ClearMode(ctx context.Context, ds, limiter string) error {
	return c.st.ClearMode(ctx, ds, limiter)
}

// Shaping modes a runner has seen: unknown until its first control
// refresh, so the mode it starts in never counts as a change.
const (
	modeUnknown int32 = iota
	modeEnforce
	modeShadow
)

// inShadow reports whether the downstream's shaping runs in shadow now.
func (r *runner) inShadow() bool {
	switch r.mode.Load() {
	case modeShadow:
		return true
	case modeEnforce:
		return false
	}
	return r.ds.ShapingMode == limiters.Shadow
}

// applyMode sets the shaping mode from the runtime state. Back from
// shadow to enforce, the bucket is cleared: in shadow next_free runs ahead
// by the backlog enforcing would have built (that is the wait it
// reports), a backlog that does not exist, and enforcing against it would
// stall the downstream for that long.
func (r *runner) applyMode(st State) {
	m := modeEnforce
	if st.ModeOf("", r.ds.ShapingMode) == limiters.Shadow {
		m = modeShadow
	}
	was := r.mode.Swap(m)
	if was == modeShadow && m == modeEnforce {
		ctx, cancel := context.WithTimeout(context.Background(), r.d.cfg.RedisTimeout)
		defer cancel()
		if err := r.d.buckets.Reset(ctx, r.ds.Name); err != nil {
			r.d.log.Warn("shaping: clearing the bucket after shadow mode failed", "downstream", r.ds.Name, "err", err)
		}
	}
	if mm := r.d.m; mm != nil {
		v := 0.0
		if m == modeShadow {
			v = 1
		}
		mm.ShadowMode.WithLabelValues(r.ds.Name).Set(v)
	}
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
		if gate := r.pauseGate(); gate != nil {
			select {
			case <-gate:
			case <-ctx.Done():
				return Reservation{}, brkToken{}, ctx.Err()
			case <-r.d.stopping:
				return Reservation{}, brkToken{}, errStopping
			}
		}
		var seq uint64
		if b := r.brk; b != nil {
			g := b.gate()
			if !g.ok {
				if !r.lane.sleepOr(g.wait, g.changed) {
					return Reservation{}, brkToken{}, errStopping
				}
				continue
			}
			seq = g.seq
		}
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

// Versions reads every downstream's change counter, the one command a
// process's control tick costs: a downstream whose counter moved has new
// runtime state (State). For producers that follow the runtime modes.
func (c *Control) Versions(ctx context.Context) (map[string]string, error) {
	return c.st.Versions(ctx)
}

// Mode is the mode a downstream's shaping runs in now in this process.
func (d *Dispatcher) Mode(downstream string) (limiters.Mode, error) {
	r, err := d.runner(downstream)
	if err != nil {
		return limiters.Enforce, err
	}
	if r.inShadow() {
		return limiters.Shadow, nil
	}
	return limiters.Enforce, nil
}
