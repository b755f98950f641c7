package shaping

import (
	"context"
	"fmt"
	"time"

	"github.com/shaper-io/shaper/internal/keys"
)

// Cleared says which of a downstream's holds Reset found and cleared.
type Cleared struct {
	// Bucket: next_free was ahead or pending (a pushback, a reported cost,
	// reservations); Announced: an announced limit was in force.
	Bucket, Announced bool
	// Quotas are the quotas (Quota.String) that counted units.
	Quotas []string
}

// Any reports whether Reset cleared anything.
func (c Cleared) Any() bool { return c.Bucket || c.Announced || len(c.Quotas) > 0 }

// Reset clears every hold on downstream ds, for every process: its
// bucket's next_free, the limit its answers announced, and the counts of
// quotas (its configured ones, as the caller's config gives them). The
// processes re-read its state within ControlInterval and a lane asleep on
// the old hold wakes. It is `shaper ctl reset`: an operator's way out of
// a hold a downstream's answer should not have caused.
func (c *Control) Reset(ctx context.Context, ds string, quotas []Quota) (Cleared, error) {
	if !keys.ValidName(ds) {
		return Cleared{}, fmt.Errorf("%w %q", ErrUnknownDownstream, ds)
	}
	ks := []string{c.space.Bucket(ds), c.space.Announced(ds)}
	for _, q := range quotas {
		ks = append(ks, c.space.Quota(ds, q.Shape()))
	}
	had, err := c.store.Clear(ctx, ks...)
	if err != nil {
		return Cleared{}, fmt.Errorf("shaping: reset %q: %w", ds, err)
	}
	out := Cleared{Bucket: had[0], Announced: had[1]}
	for i, q := range quotas {
		if had[2+i] {
			out.Quotas = append(out.Quotas, q.String())
		}
	}
	return out, c.bump(ctx, ds)
}

// SetBreaker opens (open) or closes downstream ds's circuit breaker, whose
// spec is b, for every process, and returns its mode before. Closing
// forgets the window's counts; opening holds releases for b's cool-down,
// then probes as after any opening.
func (c *Control) SetBreaker(ctx context.Context, ds string, b *Breaker, open bool) (BreakerMode, error) {
	if !keys.ValidName(ds) {
		return BreakerClosed, fmt.Errorf("%w %q", ErrUnknownDownstream, ds)
	}
	if b == nil {
		return BreakerClosed, fmt.Errorf("shaping: downstream %q has no circuit breaker", ds)
	}
	f := b.Filled()
	us := func(d time.Duration) int64 { return max(int64(d/time.Microsecond), 1) }
	before, _, err := c.store.SetBreaker(ctx, c.space.Breaker(ds), open, 0, us(f.Cooldown), us(max(f.MaxCooldown, f.Cooldown)))
	if err != nil {
		return BreakerClosed, fmt.Errorf("shaping: breaker %q: %w", ds, err)
	}
	return BreakerMode(before), c.bump(ctx, ds)
}
