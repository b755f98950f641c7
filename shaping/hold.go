package shaping

import (
	"sync"
	"time"
)

// A long hold (a spent quota, an announced limit with nothing left, a
// bucket pushed far ahead) gives the lane's waiting tasks back to the head
// of their queue, with no attempt consumed, and closes the take gate until
// the hold is about to end: nothing is held while nothing may go, and
// asynq shows the tasks pending, not active. A wait within max_wait is the
// bucket's backlog, and the tasks stay for their slots.

// longHold is how far past max_wait a reservation's first slot must lie
// for its wait to count as a hold.
const longHold = time.Second

// giveBacks signals a lane's waiters to give their tasks back.
type giveBacks struct {
	mu sync.Mutex
	ch chan struct{}
}

// signal returns a channel closed at the next give-back.
func (g *giveBacks) signal() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch == nil {
		g.ch = make(chan struct{})
	}
	return g.ch
}

// fire gives back every task waiting on signal now.
func (g *giveBacks) fire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch != nil {
		close(g.ch)
	}
	g.ch = make(chan struct{})
}

// longWait reports whether res, a reservation that found no room, waits
// out a hold rather than the bucket's backlog; then the lane's waiters go
// back and the engine takes none until the hold is about to end. A
// batching downstream's asynq server keeps its tasks (asynq takes them).
func (l *lane) longWait(res Reservation) bool {
	r := l.r
	if r.srv != nil || res.Wait <= r.ds.MaxWait+longHold {
		return false
	}
	r.holdUntil.Store(res.Now.Add(res.Wait).UnixMicro())
	l.gb.fire()
	if m := r.d.m; m != nil {
		m.HoldGiveBacks.WithLabelValues(r.ds.Name).Inc()
	}
	return true
}

// holdGate is when the engine may take again after a long hold (Redis
// clock µs in holdUntil): max_wait before it ends, so the first slots
// after it are used; zero when no hold lasts.
func (r *runner) holdGate(local time.Time) time.Time {
	us := r.holdUntil.Load()
	if us == 0 {
		return time.Time{}
	}
	at := time.UnixMicro(us).Add(r.offset.get()).Add(-r.ds.MaxWait)
	if !at.After(local) {
		return time.Time{}
	}
	return at
}
