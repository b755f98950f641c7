package shaping

import (
	"context"
	"time"
)

// SetBreakerMirror sets a downstream's breaker mirror as a read of the
// shared state would, for fake-clock tests of the gate and the verdict.
func (d *Dispatcher) SetBreakerMirror(ds string, mode BreakerMode, since, until time.Time) {
	r, _ := d.runner(ds)
	r.brk.apply(mode, since.UnixMicro(), until.UnixMicro(), false)
}

// BreakerVerdict starts the verdict on an outage error of a call released
// now, and delivers whether the task is held.
func (d *Dispatcher) BreakerVerdict(ctx context.Context, ds string) <-chan bool {
	r, _ := d.runner(ds)
	tok, _ := r.brk.claim(r.brk.current())
	ch := make(chan bool, 1)
	go func() { ch <- r.brk.holds(ctx, tok) }()
	return ch
}

// BreakerGate is the lane's gate: whether a reservation may go now, and
// how long to wait otherwise.
func (d *Dispatcher) BreakerGate(ds string) (bool, time.Duration) {
	r, _ := d.runner(ds)
	g := r.brk.gate()
	return g.ok, g.wait
}
