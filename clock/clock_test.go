package clock_test

import (
	"testing"
	"time"

	"github.com/shaper-io/shaper/clock"
	"github.com/shaper-io/shaper/internal/clocktest"
)

// nil and Real are the real clock (scripts then read Redis TIME); any
// other Clock is a test's. Or fills in Real for nil and keeps the rest.
func TestRealAndOr(t *testing.T) {
	fake := clocktest.New(time.Unix(1_800_000_000, 0))
	for i, c := range []struct {
		clk  clock.Clock
		real bool
	}{{nil, true}, {clock.Real{}, true}, {fake, false}} {
		if got := clock.IsReal(c.clk); got != c.real {
			t.Errorf("step %d: IsReal(%T) = %v, want %v", i, c.clk, got, c.real)
		}
	}
	if _, ok := clock.Or(nil).(clock.Real); !ok {
		t.Errorf("Or(nil) = %T, want clock.Real", clock.Or(nil))
	}
	if got := clock.Or(fake); got != clock.Clock(fake) {
		t.Errorf("Or(fake) = %v, want the fake itself", got)
	}
}

// Real's timers are time's: one due now fires, a stopped one never does.
func TestRealTimer(t *testing.T) {
	c := clock.Real{}
	if d := time.Since(c.Now()); d < 0 || d > time.Second {
		t.Errorf("Real.Now is %v from time.Now", d)
	}
	select {
	case <-c.NewTimer(0).C():
	case <-time.After(5 * time.Second):
		t.Fatal("a timer due now did not fire within 5s")
	}
	stopped := c.NewTimer(time.Hour)
	if !stopped.Stop() {
		t.Error("Stop of a pending timer = false, want true")
	}
	if stopped.Stop() {
		t.Error("second Stop = true, want false")
	}
}
