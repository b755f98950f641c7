// Package clock is the one time seam of shaper's libraries: limiters
// (decisions, the pre-filter), shaping (the dispatcher's waits for its
// bucket slots, the control loop, schedules, the adaptive rate) and queue
// (cron ticks) all take a Clock, and a nil one everywhere means Real.
//
// Production runs on Real, and every Lua script reads Redis TIME so that
// hosts agree (DESIGN invariant 6). A Clock other than Real is for tests
// and simulations, like uber-go/ratelimit's WithClock or River's
// TimeStub: it moves by hand, so windows, ticks, control loops and waits
// run without waiting on the wall clock. Where a library decides on time
// in a script (a limiter's window, the adaptive rate), it hands such a
// clock's Now to the script as an explicit now; each Config says which.
package clock

import "time"

// Clock tells the time and arms timers.
type Clock interface {
	// Now is the current time.
	Now() time.Time
	// NewTimer returns a Timer that fires once, d from Now; d <= 0 fires
	// at once.
	NewTimer(d time.Duration) Timer
}

// Timer is one pending wake-up of a Clock, like *time.Timer.
type Timer interface {
	// C delivers the time once the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing; false when it already fired or
	// was stopped.
	Stop() bool
}

// Real is the system clock: time.Now and time.NewTimer. Its zero value is
// ready to use, and it is what a nil Clock means.
type Real struct{}

// Now is time.Now.
func (Real) Now() time.Time { return time.Now() }

// NewTimer is time.NewTimer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }

// Or is c, or Real when c is nil.
func Or(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}

// IsReal reports whether c is nil or Real: a library then leaves the time
// of its scripts' decisions to Redis TIME.
func IsReal(c Clock) bool {
	if c == nil {
		return true
	}
	_, ok := c.(Real)
	return ok
}
