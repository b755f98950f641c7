package shaping

import (
	"context"
	"time"

	"github.com/shaper-io/shaper/shaping/take"
)

// waiter is one worker waiting for its slot.
type waiter struct {
	cost     int64
	key      string
	queued   bool       // in l.q (l.mu)
	deadline time.Time  // the task's deadline on the local clock; zero: none
	order    int64      // the take's order (taken.order); 0: none
	done     chan grant // buffered: the lane never blocks on a waiter
}

// priority is w's priority from its take order (serveTake puts it in the
// order's high bits); 0 for a waiter with no take order.
func (w *waiter) priority() int64 { return w.order >> takeOrderBits }

// takeOrderBits is where a take order's priority starts (serveTake).
const takeOrderBits = 40

// grant is a lane's answer: the slot's start on the Redis clock, or an
// error (a cost that can never fit, or stopping).
type grant struct {
	slot   time.Time
	now    time.Time // Redis time of the decision
	seq    uint64    // the breaker's seq before the reservation (0: no breaker)
	issued int64     // the bucket's issued count just after the slot's units
	err    error
}

type placedKey struct{}

// inLine says the task whose handler got ctx has its place in the slot
// lane (or its shadow slot): the next task of its take may go on
// (take.InLine), and so may the task granted a lease after it
// (leaseTurn).
func inLine(ctx context.Context) {
	take.InLine(ctx)
	if f, ok := ctx.Value(placedKey{}).(func()); ok {
		f()
	}
}
