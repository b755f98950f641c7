package shaping

import (
	"container/list"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/shaper-io/shaper/internal/fairindex"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/shaping/take"
)

// Concurrency caps: at most Downstream.Concurrency calls in flight across
// every process (and KeyConcurrency per admission key), enforced in Redis
// with leases (concurrency.lua). A worker takes a lease before it waits
// for its slot and gives it back when the call ends; a crashed process's
// leases expire after LeaseTime. As with slots, one lease lane per
// downstream and process asks for its waiting workers in one call and
// sleeps between asks, so waiting workers never call Redis themselves.

const (
	leaseBatch   = 64                     // waiters asked for in one call
	leasePollMin = 5 * time.Millisecond   // first sleep when the cap is full
	leasePollMax = 200 * time.Millisecond // longest sleep when full (another process may free one)
)

// leaseLane grants leases to the downstream's waiting workers in FIFO
// order, skipping a waiter whose key is at its cap (no head-of-line
// blocking across keys).
type leaseLane struct {
	svc  *services
	ds   Downstream
	mu   sync.Mutex
	q    *list.List // of *leaseWaiter
	held map[string]struct{}
	kick chan struct{}
	// last is the placed channel of the waiter granted last
	last chan struct{}
	// capHeld: where a fair take holds a key's tasks at its cap, which
	// each lease that goes releases (nil: the take holds none)
	capHeld *lua.CapHeld
}

type leaseWaiter struct {
	done chan struct{} // closed when granted
	leaseTurn
}

func newLeaseLane(svc *services, ds Downstream) *leaseLane {
	l := &leaseLane{svc: svc, ds: ds, q: list.New(), held: map[string]struct{}{}, kick: make(chan struct{}, 1)}
	if ds.KeyConcurrency > 0 && ds.Fairness != nil { // a fair downstream's take holds them (never a batch's)
		f := svc.space.Fair(ds.Name)
		l.capHeld = &lua.CapHeld{Held: f.Held, Parked: f.Parked, TTL: fairindex.KeyTTL}
	}
	return l
}

func (l *leaseLane) nudge() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

func newToken() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// acquire waits for a lease for a call of admission key key and returns
// it; its member is to be given to release. The waiters are granted in
// the order they asked, skipping keys at their cap, so once this one is
// queued the next task of its take may ask (take.InLine).
func (l *leaseLane) acquire(ctx context.Context, key string) (leaseTurn, error) {
	w := &leaseWaiter{leaseTurn: leaseTurn{member: newToken() + "|" + key}, done: make(chan struct{})}
	l.mu.Lock()
	e := l.q.PushBack(w)
	l.mu.Unlock()
	take.InLine(ctx)
	l.nudge()
	select {
	case <-w.done:
		return w.leaseTurn, nil
	case <-ctx.Done():
	case <-l.svc.stopping:
	}
	l.mu.Lock()
	l.q.Remove(e)
	l.mu.Unlock()
	select {
	case <-w.done: // granted meanwhile: give it back, and its turn
		close(w.placed)
		l.release(w.member)
	default:
	}
	if ctx.Err() != nil {
		return leaseTurn{}, ctx.Err()
	}
	return leaseTurn{}, errStopping
}

// adopt holds a lease a take gave (lua.TakeLeases): it is renewed with
// the others until released, and its turn at the slot lane needs no wait
// (the take reserved its slot).
func (l *leaseLane) adopt(member string) *leaseTurn {
	l.mu.Lock()
	l.held[member] = struct{}{}
	l.gauge()
	l.mu.Unlock()
	return &leaseTurn{member: member, placed: make(chan struct{})}
}

// release gives a lease back (at once, so another process's waiter can
// take it) and wakes this process's lane.
func (l *leaseLane) release(member string) {
	l.mu.Lock()
	delete(l.held, member)
	l.gauge()
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), l.svc.cfg.RedisTimeout)
	defer cancel()
	if _, err := l.call(ctx, "release", []string{member}); err != nil {
		l.svc.log.Warn("shaping: lease release failed; it expires on its own", "downstream", l.ds.Name, "err", err)
	}
	l.nudge()
}

// call runs op ("acquire", "renew" or "release") for members; acquire
// replies a granted flag per member and then the wait in µs, the others
// the number of leases they touched.
func (l *leaseLane) call(ctx context.Context, op string, members []string) ([]int64, error) {
	sp := l.svc.space
	ls, counts := sp.Leases(l.ds.Name), sp.LeaseCounts(l.ds.Name)
	a := lua.LeaseArgs{Lease: int64(l.ds.leaseTime() / time.Microsecond), Cap: int64(l.ds.Concurrency), KeyCap: int64(l.ds.KeyConcurrency),
		Held: l.capHeld}
	var v []int64
	var err error
	switch op {
	case "acquire":
		var wait int64
		if v, wait, err = l.svc.store.AcquireLeases(ctx, ls, counts, a, members); err == nil {
			v = append(v, wait)
		}
	case "renew", "release":
		f := l.svc.store.RenewLeases
		if op == "release" {
			f = l.svc.store.ReleaseLeases
		}
		var n int64
		n, err = f(ctx, ls, counts, a, members)
		v = []int64{n}
	}
	if err != nil {
		return nil, fmt.Errorf("shaping: leases of %q: %w", l.ds.Name, err)
	}
	return v, nil
}

// waiting returns up to leaseBatch waiters from the front.
func (l *leaseLane) waiting() []*leaseWaiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*leaseWaiter
	for e := l.q.Front(); e != nil && len(out) < leaseBatch; e = e.Next() {
		out = append(out, e.Value.(*leaseWaiter))
	}
	return out
}

// run grants leases until the dispatcher stops. When no waiter could be
// granted it sleeps until a local release, the earliest lease's expiry, or
// a poll that backs off from 5ms to 200ms (another process's release is
// not announced).
func (l *leaseLane) run() {
	poll := leasePollMin
	for {
		ws := l.waiting()
		if len(ws) == 0 {
			select {
			case <-l.kick:
				continue
			case <-l.svc.stopping:
				return
			}
		}
		members := make([]string, len(ws))
		for i, w := range ws {
			members[i] = w.member
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.svc.cfg.RedisTimeout)
		v, err := l.call(ctx, "acquire", members)
		cancel()
		granted := 0
		if err == nil && len(v) == len(ws)+1 {
			granted = l.grant(ws, v[:len(ws)])
		} else if err != nil {
			l.svc.log.Warn("shaping: cannot take a lease; holding tasks until Redis answers", "downstream", l.ds.Name, "err", err)
		}
		if granted > 0 {
			poll = leasePollMin
			continue
		}
		wait := poll
		if err == nil && v[len(v)-1] >= 0 {
			wait = min(wait, time.Duration(v[len(v)-1])*time.Microsecond+time.Millisecond)
		}
		poll = min(poll*2, leasePollMax)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-l.kick:
		case <-l.svc.stopping:
			t.Stop()
			return
		}
		t.Stop()
	}
}

// grant hands out the leases the script granted; a waiter that left
// meanwhile gives its lease straight back.
func (l *leaseLane) grant(ws []*leaseWaiter, flags []int64) int {
	n := 0
	var orphans []string
	l.mu.Lock()
	for i, w := range ws {
		if flags[i] != 1 {
			continue
		}
		n++
		removed := false
		for e := l.q.Front(); e != nil; e = e.Next() {
			if e.Value.(*leaseWaiter) == w {
				l.q.Remove(e)
				removed = true
				break
			}
		}
		if !removed {
			orphans = append(orphans, w.member)
			continue
		}
		l.held[w.member] = struct{}{}
		w.prev, w.placed = l.last, make(chan struct{})
		l.last = w.placed
		close(w.done)
	}
	l.gauge()
	l.mu.Unlock()
	for _, m := range orphans {
		l.release(m)
	}
	return n
}

// renewLoop extends the leases this process holds every third of the
// lease time, in one call, so a long call keeps its place.
func (l *leaseLane) renewLoop() {
	t := time.NewTicker(l.ds.leaseTime() / 3)
	defer t.Stop()
	for {
		select {
		case <-l.svc.stopping:
			return
		case <-t.C:
		}
		l.mu.Lock()
		members := make([]string, 0, len(l.held))
		for m := range l.held {
			members = append(members, m)
		}
		l.mu.Unlock()
		if len(members) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.svc.cfg.RedisTimeout)
		if _, err := l.call(ctx, "renew", members); err != nil {
			l.svc.log.Warn("shaping: lease renewal failed", "downstream", l.ds.Name, "err", err)
		}
		cancel()
	}
}

// gauge publishes the leases held (l.mu held).
func (l *leaseLane) gauge() {
	if m := l.svc.m; m != nil {
		m.LeasesInUse.WithLabelValues(l.ds.Name).Set(float64(len(l.held)))
	}
}
