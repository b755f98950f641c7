package shaping

import (
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/clocktest"
	"github.com/shaper-io/shaper/limiters"
)

// skipLate is the one late check, made just before the handler is called:
// a release more than its late tolerance behind its local slot is skipped,
// one at the tolerance goes out, and a reservation without a due time
// (shadow mode) is never skipped.
func TestSkipLateAtTheRelease(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	r, _ := testRunner(now, limiters.PerSecond(50), Downstream{Name: "api"})
	tol := r.lateTolerance(1) // 10ms: half of a 20ms slot
	if tol != 10*time.Millisecond {
		t.Fatalf("late tolerance at 50/s = %v, want 10ms", tol)
	}
	for _, c := range []struct {
		late time.Duration
		skip bool
	}{{0, false}, {tol, false}, {tol + time.Microsecond, true}, {38 * time.Millisecond, true}} {
		res := Reservation{OK: true, Count: 1, Now: now, cost: 1, due: now.Add(-c.late)}
		if got := r.skipLate(res); got != c.skip {
			t.Errorf("skipLate %v behind the slot = %v, want %v", c.late, got, c.skip)
		}
	}
	if r.skipLate(Reservation{OK: true, Count: 1, Now: now, cost: 1}) {
		t.Error("skipLate without a due time (shadow mode) = true, want false")
	}
}

// testRunner is a runner of ds at rate, its dispatcher on a fake clock at
// now: enough for the runner's and lane's own arithmetic.
func testRunner(now time.Time, rate limiters.Limit, ds Downstream) (*runner, *clocktest.Fake) {
	clk := clocktest.New(now)
	r := &runner{d: &services{cfg: Config{Clock: clk}}, ds: ds}
	r.rate.Store(&rate)
	return r, clk
}
