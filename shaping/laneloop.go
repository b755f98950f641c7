package shaping

// The lane's run loop: it asks the release gates (gates.go), then serves
// FIFO runs of waiters with one reservation each.

import (
	"context"
	"errors"

	"github.com/shaper-io/shaper/limiters"
)

// run serves the waiters until the dispatcher stops.
func (l *lane) run() {
	r := l.r
	l.backoff = minBackoff
	for {
		cost, n, claim := l.head()
		if n == 0 {
			select {
			case <-l.kick:
				continue
			case <-r.d.stopping:
				return
			}
		}
		g := r.releaseGate()
		if !g.ok {
			if !r.await(context.Background(), g) {
				return
			}
			continue
		}
		seq, probe := g.seq, g.probe
		ask := n
		if probe {
			ask = 1 // a half-open probe
		} else if r.srv != nil && l.behindNow() {
			// a batch: stock for workers still to come (an engine
			// downstream's takes reserve their tasks' slots, and stock
			// would only push later the slots of the next take)
			ask = min(n+min(r.ds.Workers, maxStock), maxSlotsPerCall)
		}
		if probe {
			claim = Claim{}
		}
		res, err := l.reserve(cost, ask, r.lookahead(), claim)
		switch {
		case errors.Is(err, limiters.ErrCostExceedsCapacity):
			l.refuse(cost, err) // no wait will make room: the task is refused
			continue
		case err != nil:
			if !l.trouble("cannot reserve a slot", err) {
				return
			}
			continue
		}
		if res.Count > 0 {
			l.hand(cost, res, seq)
			continue
		}
		if !l.full(res, cost, n) {
			return
		}
	}
}
