package shaping

import (
	"container/list"
	"context"
	"errors"
	"math"
	"sync/atomic"
	"time"

	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/limiters"
)

// keyCeiling serves a fair lane whose downstream caps each key's rate
// (Fairness.KeyRate), deciding the ceiling in Redis before any slot is
// reserved. Each key has a tat (GCRA without a burst: the earliest start
// its next slot may have), one STRING per key shared by every process.
// For each run of slots the lane picks candidates (in fair order, one
// waiter per key whose key's tat has come as far as it knows), and one
// script call (keyceiling.lua) claims the keys whose tat has come, in
// that order, holding each claimed key until its slot is known; the lane
// then reserves one slot per claimed key, starting within the claim's
// hold, hands slot j to the j-th claimed waiter, and settles each claim
// at its slot's start plus the key's interval (a claim that got no slot
// is dropped) in its next script call. A key's slots are thus at least
// its interval apart across every process, and no slot is reserved for a
// key that may not take it.
//
// The lane keeps each key's tat as the replies last said (no more than
// the shared one), so that it claims only keys that may be free and,
// when none may, sleeps until the earliest tat or a new waiter. The cost
// is one script call per run of slots (settlements ride on the next
// claim, or go alone before the lane sleeps), on downstreams with a
// KeyRate only.
type keyCeiling struct {
	l *lane
	f *Fairness // KeyRateOf: each key's ceiling
	// The rest is the run loop's alone.
	tat     map[string]time.Time // key → its tat on the Redis clock as last known
	sweepAt int                  // tat's size that triggers a sweep of passed tats
	settle  []settlement         // claims to settle in the next call
	seen    map[string]bool      // pick's scratch: keys with a candidate

	calls, claims, failed atomic.Int64 // script calls, keys claimed, candidates refused
}

// settlement is a claim to settle: key's tat becomes tat (zero: the claim
// got no slot) if the key still holds claim.
type settlement struct {
	key, claim string
	tat        time.Time
}

// ceilingMargin is how long a key's tat STRING outlives its tat.
const ceilingMargin = time.Second

func newKeyCeiling(l *lane, f *Fairness) *keyCeiling {
	return &keyCeiling{l: l, f: f, tat: map[string]time.Time{}, seen: map[string]bool{}, sweepAt: 1024}
}

// rateOf is key's ceiling; a key with none is capped only by the
// downstream's rate in force.
func (c *keyCeiling) rateOf(key string) limiters.Limit {
	if r := c.f.KeyRateOf(key); r.Rate > 0 {
		return r
	}
	return *c.l.r.rate.Load()
}

// interval is how far a slot of cost moves its key's tat past the slot:
// cost at KeyRate, stretched by the lateness tol a release may start
// with (interval × (1 + tol/1s)). A key's releases in any second then come
// from slots within 1s + tol, at most KeyRate's units in a second plus
// one task's cost of them (for cost 1: at most KeyRate + 1 releases). A
// downstream that never skips late releases (LateTolerance < 0) has no
// bound on lateness, and nothing is added.
func (c *keyCeiling) interval(cost int64, key string) time.Duration {
	iv := c.rateOf(key).Interval(cost)
	if r := c.l.r; r.ds.LateTolerance >= 0 {
		slack := math.Ceil(float64(iv) * r.lateTolerance(cost).Seconds() / float64(time.Microsecond))
		iv += time.Duration(min(slack, float64(MaxInterval/time.Microsecond))) * time.Microsecond
	}
	return iv
}

// candidate is a waiter that may claim its key.
type candidate struct {
	e *list.Element
	w *waiter
}

// picked is what pick chose for the next run of slots.
type picked struct {
	cost  int64
	cands []candidate
	// wait is how long until the earliest waiter's key may be claimed,
	// when there is no candidate
	wait time.Duration
}

// pick chooses the candidates for the next run of slots: in fair order,
// the first waiter of each key whose tat has come by what the lane knows,
// all of the first such waiter's cost, at most maxBatch. It takes l.mu.
func (c *keyCeiling) pick() picked {
	l, r := c.l, c.l.r
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropExpired()
	now := r.d.cfg.Clock.Now()
	l.fair.sort(l.q, now)
	nowR := now.Add(-r.offset.get()) // now on the Redis clock
	var p picked
	var earliest time.Time
	clear(c.seen)
	for e := l.q.Front(); e != nil && len(p.cands) < maxBatch; e = e.Next() {
		w := e.Value.(*waiter)
		// one run of slots serves keys of one cost and one ceiling
		if c.seen[w.key] || p.cost != 0 && (w.cost != p.cost || c.rateOf(w.key) != c.rateOf(p.cands[0].w.key)) {
			continue
		}
		c.seen[w.key] = true
		if t := c.tat[w.key]; t.After(nowR) {
			if earliest.IsZero() || t.Before(earliest) {
				earliest = t
			}
			continue
		}
		p.cost = w.cost
		p.cands = append(p.cands, candidate{e: e, w: w})
	}
	held := 0
	for e := l.q.Front(); e != nil; e = e.Next() {
		if c.tat[e.Value.(*waiter).key].After(nowR) {
			held++
		}
	}
	// fewer may go: the engine asks Want again within wantRecheck
	l.ceilinged.Store(int32(held))
	if len(p.cands) == 0 && !earliest.IsZero() {
		p.wait = max(earliest.Sub(nowR), time.Millisecond)
	}
	return p
}

// serve gives one run of slots to the lane's waiters under the ceiling
// (the run loop, once it found waiters and its gates open; probe: a
// half-open breaker's single probe); false when the dispatcher stops.
func (c *keyCeiling) serve(seq uint64, probe bool) bool {
	l, r := c.l, c.l.r
	p := c.pick()
	if len(p.cands) == 0 {
		c.flush()
		if p.wait == 0 {
			return true // every waiter left meanwhile
		}
		return l.sleepKick(p.wait) // no waiter's key may take a slot yet
	}
	want := len(p.cands)
	if probe {
		want = 1
	} else if room, wait := l.fairRoom(p.cost); room == 0 {
		c.flush()
		return l.sleep(wait)
	} else {
		want = min(want, room)
	}
	// the claim holds a key claimSlack past the slots' horizon (la): the
	// reservation's own trip to Redis is not in its maxWait, and a slot
	// past the hold would be wasted (hand)
	iv, la := c.interval(p.cost, p.cands[0].w.key), r.lookahead()
	hold := la + claimSlack
	sent := r.d.cfg.Clock.Now()
	rep, err := c.call(p.cands, want, iv, hold)
	if err != nil {
		return l.trouble("cannot claim keys under the key ceiling", err)
	}
	var claimed []candidate
	for i, ok := range rep.Claimed {
		if ok {
			claimed = append(claimed, p.cands[i])
		}
	}
	if len(claimed) == 0 {
		return true // taken meanwhile by other processes: the tats say until when
	}
	// the slots must start within the claim's hold of its now; one that
	// starts later (a slow reply) is not used
	end := time.UnixMicro(rep.Now).Add(hold)
	res, err := l.reserve(p.cost, len(claimed), max(la-r.d.cfg.Clock.Now().Sub(sent), 0), Claim{})
	switch {
	case errors.Is(err, limiters.ErrCostExceedsCapacity):
		c.unclaimAll(claimed, rep.Claim)
		c.refuse(claimed[0], err) // no wait will make room: the task is refused
		return true
	case err != nil:
		c.unclaimAll(claimed, rep.Claim)
		return l.trouble("cannot reserve a slot", err)
	case res.Count == 0:
		c.unclaimAll(claimed, rep.Claim)
		return l.full(res, p.cost, len(claimed))
	}
	c.hand(claimed, rep.Claim, res, seq, iv, end)
	return true
}

// claimSlack is how much longer than the lane's look-ahead a claim holds
// its key: more than the reservation that follows the claim takes to
// reach Redis, so its slots start within the hold.
const claimSlack = 25 * time.Millisecond

// call runs keyceiling.lua: the pending settlements, then cands claim, at
// most want.
func (c *keyCeiling) call(cands []candidate, want int, iv, hold time.Duration) (lua.KeyCeilingReply, error) {
	r := c.l.r
	idx := map[string]int{}
	var names, tats []string
	key := func(k string) int {
		i, ok := idx[k]
		if !ok {
			i = len(names)
			idx[k] = i
			names = append(names, k)
			tats = append(tats, r.d.buckets.space.KeyCeiling(r.ds.Name, k))
		}
		return i
	}
	a := lua.KeyCeilingArgs{Interval: iv.Microseconds(), Hold: hold.Microseconds(), MarginMs: ceilingMargin.Milliseconds(),
		Now: lua.NowArg(r.d.cfg.Clock), Want: want}
	for _, s := range c.settle {
		st := lua.KeySettle{Key: key(s.key), Claim: s.claim}
		if !s.tat.IsZero() {
			st.TAT = s.tat.UnixMicro()
		}
		a.Settle = append(a.Settle, st)
	}
	for _, cd := range cands {
		a.Candidates = append(a.Candidates, key(cd.w.key))
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.d.cfg.RedisTimeout)
	start := time.Now()
	rep, err := r.d.buckets.store.KeyCeiling(ctx, tats, a)
	cancel()
	r.d.m.ObserveScript("keyceiling", time.Since(start), err)
	c.calls.Add(1)
	if err != nil {
		return rep, err // the settlements stay pending
	}
	c.settle = c.settle[:0]
	for i, k := range names {
		if rep.TAT[i] > 0 {
			c.tat[k] = time.UnixMicro(rep.TAT[i])
		} else {
			delete(c.tat, k)
		}
	}
	for _, ok := range rep.Claimed {
		if ok {
			c.claims.Add(1)
		} else {
			c.failed.Add(1)
		}
	}
	c.sweep(time.UnixMicro(rep.Now))
	return rep, nil
}

// flush settles the pending claims now (before the lane sleeps, so that
// other processes need not wait for their holds).
func (c *keyCeiling) flush() {
	if len(c.settle) == 0 {
		return
	}
	if _, err := c.call(nil, 0, 0, c.l.r.lookahead()); err != nil {
		c.l.r.d.log.Debug("shaping: cannot settle key ceiling claims; they lapse on their own", "downstream", c.l.r.ds.Name, "err", err)
	}
}

// hand gives slot j of res to the j-th claimed waiter, and notes each
// claim's settlement: its slot's start plus iv, or none for a claim whose
// slot is not used (past end, or its waiter gone or past its deadline),
// those slots being wasted.
func (c *keyCeiling) hand(claimed []candidate, claim string, res Reservation, seq uint64, iv time.Duration, end time.Time) {
	l, r := c.l, c.l.r
	var gone []grant
	l.mu.Lock()
	now := r.d.cfg.Clock.Now()
	for j, cd := range claimed {
		if j >= res.Count {
			c.unclaim(cd, claim)
			continue
		}
		g := grant{slot: res.SlotN(j), now: res.Now, seq: seq, issued: res.seqN(j)}
		if g.slot.After(end) || !cd.w.queued {
			gone = append(gone, g)
			c.unclaim(cd, claim)
			continue
		}
		w := l.remove(cd.e)
		if l.tooLate(w, g.slot) {
			w.done <- grant{err: ErrDeadlinePassed}
			gone = append(gone, g)
			c.unclaim(cd, claim)
			continue
		}
		l.fair.served(w.key, w.cost, now)
		w.done <- g
		c.tat[w.key] = g.slot.Add(iv)
		c.settle = append(c.settle, settlement{key: w.key, claim: claim, tat: g.slot.Add(iv)})
	}
	l.mu.Unlock()
	r.wasted(claimed[0].w.cost, gone...)
}

// unclaim drops cd's claim, which got no slot (settled in the next call:
// its key's tat was at most the claim's now, the same as none).
func (c *keyCeiling) unclaim(cd candidate, claim string) {
	c.settle = append(c.settle, settlement{key: cd.w.key, claim: claim})
	delete(c.tat, cd.w.key)
}

// unclaimAll drops claims that got no slot.
func (c *keyCeiling) unclaimAll(claimed []candidate, claim string) {
	for _, cd := range claimed {
		c.unclaim(cd, claim)
	}
}

// refuse gives cd's waiter an error no wait would cure.
func (c *keyCeiling) refuse(cd candidate, err error) {
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if cd.w.queued {
		l.remove(cd.e).done <- grant{err: err}
	}
}

// sweep forgets the tats passed at nowR (the same as none) once the map
// has doubled since the last sweep: O(1) a call, however many keys.
func (c *keyCeiling) sweep(nowR time.Time) {
	if len(c.tat) <= c.sweepAt {
		return
	}
	for k, t := range c.tat {
		if !t.After(nowR) {
			delete(c.tat, k)
		}
	}
	c.sweepAt = 2*len(c.tat) + 1024
}

// sleepKick waits d, or until a new waiter queues or a control change
// wakes the runner; false when the dispatcher stops.
func (l *lane) sleepKick(d time.Duration) bool {
	t := l.r.d.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
	case <-l.kick:
	case <-l.r.wakeCh():
	case <-l.r.d.stopping:
		return false
	}
	return true
}
