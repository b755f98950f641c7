package shaping

import (
	"context"
	"io"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/clocktest"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
)

// AIMD stepped on the fake clock, two processes sharing one rate: the
// adaptive script dates every change with the clock's now (lua.NowArg), so
// its interval rules are exact without a wall-clock wait. A burst of
// throttled answers in both processes is one decrease (×0.75); the next
// waits a full Interval; the rate never falls below Floor; successes raise
// it by Step only after a calm Interval, back to ≥ 45/s and up to the
// ceiling, never past it. (TestAdaptiveConverges checks the same loop
// against a real 429-ing sink on the wall clock.)
func TestAdaptiveStepsOnTheFakeClock(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	clk := clocktest.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	ceiling := limiters.PerSecond(50)
	a := &Adaptive{Floor: limiters.PerSecond(5), Ceiling: ceiling} // ×0.75, step 2.5/s, interval 1s
	var rs [2]*runner
	for i := range rs {
		d := New(rdb, Config{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: clk})
		if err := d.Add(Downstream{Name: "api", Rate: ceiling, Adaptive: a,
			Handler: func(context.Context, *Task) error { return nil }}); err != nil {
			t.Fatal(err)
		}
		rs[i] = d.runners["api"]
	}
	step := 0
	expect := func(what string, want float64) {
		t.Helper()
		step++
		for i, r := range rs {
			if got := r.rate.Load().PerSec(); math.Abs(got-want) > 0.001 {
				t.Fatalf("step %d (%s): process %d rate %.3f/s, want %.3f/s", step, what, i, got, want)
			}
		}
		st, err := rs[0].d.control.State(context.Background(), "api")
		if err != nil || math.Abs(st.Adaptive-want) > 0.001 {
			t.Fatalf("step %d (%s): shared adaptive rate %v (%v), want %.3f/s", step, what, st.Adaptive, err, want)
		}
	}
	for i := range 10 {
		rs[i%2].adapt("dec")
	}
	expect("ten 429s at once", 37.5)
	clk.Advance(time.Second - time.Millisecond)
	rs[0].adapt("dec")
	rs[1].adapt("dec")
	expect("429s 1ms before the interval ends", 37.5)
	clk.Advance(time.Millisecond)
	rs[1].adapt("dec")
	rs[0].adapt("dec")
	expect("429s an interval later", 28.125)
	for range 20 {
		clk.Advance(time.Second)
		rs[0].adapt("dec")
		rs[1].adapt("dec") // the process that did not decrease learns the rate from the reply
	}
	expect("a 429 every interval for 20s", 5)
	rs[0].adapt("inc")
	rs[1].adapt("inc")
	expect("successes right after a decrease", 5)
	want, reached := 5.0, time.Duration(0)
	for k := 1; k <= 25; k++ {
		clk.Advance(time.Second)
		rs[k%2].adapt("inc")
		rs[(k+1)%2].adapt("inc") // within the same interval: no second step
		want = math.Min(want+2.5, 50)
		expect("a calm interval of successes", want)
		if want >= 45 && reached == 0 {
			reached = time.Duration(k) * time.Second
		}
	}
	if reached == 0 || reached > 30*time.Second {
		t.Errorf("the rate reached 45/s after %v of successes, want within 30s", reached)
	}
}
