package shaping_test

import (
	"context"
	"testing"
	"time"

	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/shaping"
	"github.com/shaper-io/shaper/shaping/internal/clocktest"
)

// breakerOnFakeClock is a dispatcher (never started, no Redis) with a
// breaker downstream at 50/s: window 2s, 10 calls at least, so the verdict
// on a failed call waits 10 × 20ms + 100ms + 2 × 250ms = 800ms.
func breakerOnFakeClock(t *testing.T) (*shaping.Dispatcher, *clocktest.Fake) {
	t.Helper()
	clk := clocktest.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	d := shaping.New(nil, shaping.Config{Clock: clk, ControlInterval: 250 * time.Millisecond})
	must(t, d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(50), Handler: shaping.LogHandler(t.Logf),
		Breaker: &shaping.Breaker{Window: 2 * time.Second, MinCalls: 10}}))
	return d, clk
}

// A failed call's task waits for the verdict exactly as long as MinCalls
// take at the rate plus the report batching and two control ticks; with
// the breaker still closed then, the failure is the task's own.
func TestBreakerVerdictWaitOnTheFakeClock(t *testing.T) {
	t.Parallel()
	d, clk := breakerOnFakeClock(t)
	held := d.BreakerVerdict(context.Background(), "api")
	waitFor(t, 5*time.Second, "the verdict's timer", func() bool { return len(clk.Pending()) == 1 })
	clk.Advance(800*time.Millisecond - time.Microsecond)
	select {
	case h := <-held:
		t.Fatalf("verdict %v before 800ms", h)
	default:
	}
	clk.Advance(time.Microsecond)
	select {
	case h := <-held:
		if h {
			t.Error("held with the breaker still closed, want the ordinary retry path")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no verdict 800ms after the failure")
	}
}

// Once the breaker opens, a failed call's task is held at once, without
// waiting out the verdict; the lane's gate then waits out the cool-down
// without a Redis call, and lets reservations go again once it closes.
func TestBreakerHoldsAndGatesOnTheFakeClock(t *testing.T) {
	t.Parallel()
	d, clk := breakerOnFakeClock(t)
	held := d.BreakerVerdict(context.Background(), "api")
	d.SetBreakerMirror("api", shaping.BreakerOpen, clk.Now(), clk.Now().Add(3*time.Second))
	select {
	case h := <-held:
		if !h {
			t.Error("not held although the breaker opened after the release")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no verdict after the breaker opened")
	}
	if ok, wait := d.BreakerGate("api"); ok || wait < 3*time.Second || wait > 3*time.Second+5*time.Millisecond {
		t.Errorf("gate while open: ok %v wait %s, want no and the 3s cool-down (+ under 5ms jitter)", ok, wait)
	}
	clk.Advance(time.Second)
	if ok, wait := d.BreakerGate("api"); ok || wait < 2*time.Second || wait > 2*time.Second+5*time.Millisecond {
		t.Errorf("gate 1s later: ok %v wait %s, want no and 2s left", ok, wait)
	}
	if st, _ := d.Breaker("api"); st.Mode != shaping.BreakerOpen || !st.Until.Equal(clk.Now().Add(2*time.Second)) {
		t.Errorf("status %+v, want open until 2s from now", st)
	}
	d.SetBreakerMirror("api", shaping.BreakerClosed, clk.Now(), time.Time{})
	if ok, _ := d.BreakerGate("api"); !ok {
		t.Error("gate once closed: not ok")
	}
}
