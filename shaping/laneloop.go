package shaping

// The lane's run loop: it asks the release gates (gates.go), then serves
// the waiters by the lane's policy: a key ceiling's claims, a fair lane's
// stock handed in fair order as each slot comes due, or FIFO runs of
// waiters with one reservation each.

import (
	"context"
	"errors"
	"time"

	"github.com/shaper-io/shaper/limiters"
)

// run serves the waiters until the dispatcher stops.
func (l *lane) run() {
	r := l.r
	l.backoff = minBackoff
	for {
		var cost int64
		var n int
		var claim Claim
		if l.kc == nil && l.fair != nil && r.ds.Fairness.Ceilinged() {
			// an operator gave a key its own rate (shaper ctl key)
			l.kc = newKeyCeiling(l, r.ds.Fairness)
		}
		if l.kc != nil {
			n = l.waiting()
		} else {
			cost, n, claim = l.head()
		}
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
		if l.kc != nil {
			if !l.kc.serve(seq, probe) {
				return
			}
			continue
		}
		ask := n
		if probe {
			ask = 1 // a half-open probe
		} else if !r.reserving && l.behindNow() {
			// stock for workers still to come; an engine downstream's
			// takes bring tasks just ahead of their slots, and stock
			// would only push their slots later
			ask = min(n+min(r.ds.Workers, maxStock), maxSlotsPerCall)
		} else if r.reserving {
			// the tasks of the take still to come: their slots go to
			// the stock they take from as they arrive
			owed := l.takeOwed()
			ask = min(n+owed, maxSlotsPerCall)
			if claim.Level > 0 {
				claim.Waiting += owed
			}
		}
		if l.fair != nil && !probe {
			room, again, ok := l.fairTurn(cost, n, seq)
			if !ok {
				return
			}
			if again {
				continue
			}
			ask = min(ask, room)
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
			if l.fair != nil && !probe {
				l.stockFair(cost, res, seq)
			} else {
				l.hand(cost, res, seq)
			}
			continue
		}
		if !l.full(res, cost, n) {
			return
		}
	}
}

// fairTurn is a fair lane's step before it reserves. It hands a stocked
// slot that is due, or sleeps while the stock covers the waiters or the
// lane holds its room's worth of slots (again: the run loop goes round),
// or says how many more slots to reserve (ask). false when the dispatcher
// stops.
func (l *lane) fairTurn(cost int64, n int, seq uint64) (ask int, again, ok bool) {
	due, handed, covered := l.handDue(cost, n, seq)
	switch {
	case handed:
		return 0, true, true
	case covered:
		return 0, true, l.sleepKick(due)
	}
	room, wait := l.fairRoom(cost)
	if room == 0 {
		if due > 0 {
			wait = min(wait, due)
		}
		return 0, true, l.sleep(wait)
	}
	return min(max(n-l.stocked(cost), 1), room, l.fairBatch(cost)), false, true
}

// fairBatch is the most slots a fair lane reserves in one call: its
// process's part of fairTakeEvery's slots, at least 1. The processes'
// reservations then interleave finely, so each holds slots spread over
// the look-ahead rather than one run of them: a task that passes the
// others here (a newcomer) finds one of its process's slots soon.
func (l *lane) fairBatch(cost int64) int {
	r := l.r
	units := r.rate.Load().UnitsIn(fairTakeEvery) / max(cost, 1)
	procs := max(r.d.procs.Load(), 1)
	return max(int(units/procs), 1)
}

// stockFair keeps a fair lane's reserved slots (res, of cost, in the
// breaker's spell seq) in its stock, after any it holds (l.mu not held).
func (l *lane) stockFair(cost int64, res Reservation, seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.restock(cost, seq)
	for j := range res.Count {
		l.stock = append(l.stock, grant{slot: res.SlotN(j), now: res.Now, seq: seq, issued: res.seqN(j)})
	}
}

// stocked is how many slots of cost a fair lane holds unassigned.
func (l *lane) stocked(cost int64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stockCost != cost {
		return 0
	}
	return len(l.stock)
}

// handDue gives a fair lane's first stocked slot, once it starts within
// fairHandLead, to the first waiter of its cost in fair order (handed).
// Otherwise it says how long until that slot is due (wait) and whether
// the stock covers the n waiters of cost at the front (covered), so the
// lane reserves no more. Slots of another breaker spell, and slots past
// their tolerance, are wasted (l.mu not held).
func (l *lane) handDue(cost int64, n int, seq uint64) (wait time.Duration, handed, covered bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now, off := l.r.d.cfg.Clock.Now(), l.r.offset.get()
	if l.stockSeq != seq {
		l.r.wasted(l.stockCost, l.stock...) // of another breaker spell
		l.stock = nil
	}
	l.dropStale()
	if len(l.stock) == 0 {
		return 0, false, false
	}
	g := l.stock[0]
	if d := g.slot.Add(off).Sub(now); d > fairHandLead {
		return d - fairHandLead, false, l.stockCost == cost && len(l.stock) >= n
	}
	for e := l.q.Front(); e != nil; {
		next := e.Next()
		w := e.Value.(*waiter)
		switch {
		case w.cost != l.stockCost:
		case l.tooLate(w, g.slot):
			l.remove(e).done <- grant{err: ErrDeadlinePassed}
		default:
			l.stock = l.stock[1:]
			l.remove(e)
			l.fair.served(w.key, w.cost, now)
			w.done <- g
			return 0, true, false
		}
		e = next
	}
	return 0, false, false // no waiter of the stock's cost: reserve for the head's
}

// fairTakeEvery is how often a fair downstream under a backlog takes.
const fairTakeEvery = 20 * time.Millisecond
