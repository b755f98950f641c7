// Package clocktest is a fake clock.Clock for tests of limiters, shaping
// and queue: time stands still until the test advances it, and timers
// fire, in due order, only when an advance reaches them.
package clocktest

import (
	"sort"
	"sync"
	"time"

	"github.com/shaper-io/shaper/clock"
)

// Fake is a manual clock.Clock. The zero value is not usable: call New.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer // pending, in no order
}

// New returns a fake clock reading start.
func New(start time.Time) *Fake { return &Fake{now: start} }

type timer struct {
	f   *Fake
	due time.Time
	c   chan time.Time
}

func (t *timer) C() <-chan time.Time { return t.c }

func (t *timer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	for i, p := range t.f.timers {
		if p == t {
			t.f.timers = append(t.f.timers[:i], t.f.timers[i+1:]...)
			return true
		}
	}
	return false
}

// Now is the fake's current time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer due d from Now; d <= 0 fires at once.
func (f *Fake) NewTimer(d time.Duration) clock.Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &timer{f: f, due: f.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- f.now
		return t
	}
	f.timers = append(f.timers, t)
	return t
}

// Advance moves the clock forward by d, firing every timer due by then.
func (f *Fake) Advance(d time.Duration) { f.AdvanceTo(f.Now().Add(d)) }

// AdvanceTo moves the clock to at (never backwards) and fires, in due
// order, every timer due by then; each sees the time it was due.
func (f *Fake) AdvanceTo(at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if at.After(f.now) {
		f.now = at
	}
	sort.Slice(f.timers, func(i, j int) bool { return f.timers[i].due.Before(f.timers[j].due) })
	n := 0
	for _, t := range f.timers {
		if t.due.After(f.now) {
			break
		}
		t.c <- t.due // buffered, and each timer fires once
		n++
	}
	f.timers = append([]*timer(nil), f.timers[n:]...)
}

// Pending returns the due times of the timers not yet fired, earliest
// first: a test polls it to know a goroutine is asleep before advancing.
func (f *Fake) Pending() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]time.Time, 0, len(f.timers))
	for _, t := range f.timers {
		out = append(out, t.due)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}
