package shaping

import (
	"sync"
	"sync/atomic"
	"time"
)

// A long hold (a spent quota, an announced limit with nothing left, a
// bucket pushed far ahead) gives the lane's waiting tasks back to the head
// of their queue, with no attempt consumed, and closes the take gate until
// the hold is about to end: nothing is held while nothing may go, and
// asynq shows the tasks pending, not active. A wait within max_wait is the
// bucket's backlog, and the tasks stay for their slots.

// longHoldPast is how far past max_wait a reservation's first slot must lie
// for its wait to count as a hold.
const longHoldPast = time.Second

// broadcast wakes every goroutine waiting on it at once: fire closes the
// channel that wait handed out and starts a new one.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed at the next fire.
func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// fire closes the channel wait handed out, and starts a new one.
func (b *broadcast) fire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
	}
	b.ch = make(chan struct{})
}

// holds is one downstream's long hold in this process.
type holds struct {
	maxWait time.Duration
	// until is when the hold ends (µs, Redis clock); 0: none
	until     atomic.Int64
	giveBacks broadcast
}

// observe looks at a reservation that found no room: when its wait is a
// hold rather than the bucket's backlog, it records the hold's end and
// gives back every task waiting on signal, and reports true.
func (h *holds) observe(res Reservation) bool {
	if res.Wait <= h.maxWait+longHoldPast {
		return false
	}
	h.until.Store(res.Now.Add(res.Wait).UnixMicro())
	h.giveBacks.fire()
	return true
}

// signal returns a channel closed at the next give-back.
func (h *holds) signal() <-chan struct{} { return h.giveBacks.wait() }

// clear forgets the hold (a control change: a reset, a rate).
func (h *holds) clear() { h.until.Store(0) }

// gate is when the engine may take again (local clock; offset is local
// minus Redis time): max_wait before the hold ends, so the first slots
// after it are used; zero when no hold lasts at local.
func (h *holds) gate(local time.Time, offset time.Duration) time.Time {
	us := h.until.Load()
	if us == 0 {
		return time.Time{}
	}
	at := time.UnixMicro(us).Add(offset).Add(-h.maxWait)
	if !at.After(local) {
		return time.Time{}
	}
	return at
}
