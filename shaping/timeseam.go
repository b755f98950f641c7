package shaping

import "time"

// Clock is the process's own clock as the dispatcher sees it: the time
// schedules are read at, the local side of the Redis clock offset, and
// every wait of the release path, the control loop and the liveness loop.
// Slot times and bucket state stay on the Redis clock (scripts read Redis
// TIME), so a Clock never moves the shared schedule of releases; it only
// moves when this process wakes up to use them.
//
// The zero Config.Clock (nil) is the real clock (time.Now and
// time.NewTimer). Tests pass a fake one that advances by hand, like
// uber-go/ratelimit's WithClock or River's TimeStub, so control, schedule
// and late-skip behaviour can be checked without wall-clock waits.
type Clock interface {
	// Now is the current local time.
	Now() time.Time
	// NewTimer returns a Timer that fires once, d from Now.
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

// realClock is the Clock of a nil Config.Clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }
