package enqueuecli

import (
	"context"
	"errors"
	"time"

	"github.com/shaper-io/shaper/limiters"
)

// pacer spaces enqueues at a rate. Timer and scheduling jitter are made
// up (so 1000/s comes out near 1000/s), but a longer stall is not: after
// falling more than pacerSlack behind, the next slot is now, so a slow
// call never causes a burst of more than pacerSlack × rate.
type pacer struct {
	interval time.Duration
	next     time.Time
}

const pacerSlack = 10 * time.Millisecond

func newPacer(l limiters.Limit) *pacer {
	if l.IsZero() {
		return &pacer{}
	}
	return &pacer{interval: l.Interval(1)}
}

func (p *pacer) wait(ctx context.Context, stopped <-chan struct{}) error {
	if p.interval <= 0 {
		return nil
	}
	now := time.Now()
	if p.next.Before(now.Add(-pacerSlack)) {
		p.next = now
	}
	d := p.next.Sub(now)
	p.next = p.next.Add(p.interval)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-stopped:
		return errors.New("stopped")
	}
}
