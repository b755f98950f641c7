package sizing

import (
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/field"
	"github.com/shaper-io/shaper/limiters"
)

func TestLateToleranceAndPaceSlack(t *testing.T) {
	t.Parallel()
	for i, tt := range []struct {
		rate      limiters.Limit
		cost      int64
		tol       time.Duration
		slack     time.Duration
		under1Bin bool // tol below one slot: no slack needed
	}{
		{limiters.PerSecond(10), 1, 50 * time.Millisecond, 0, true},                       // half of 100ms
		{limiters.PerSecond(100), 1, 5 * time.Millisecond, 0, true},                       // half 5ms = floor
		{limiters.PerSecond(150), 1, 5 * time.Millisecond, 0, true},                       // 6.67ms slot: floor, under it
		{limiters.PerSecond(200), 1, 5*time.Millisecond - time.Microsecond, 0, true},      // kept just under the 5ms slot
		{limiters.PerSecond(250), 1, 4*time.Millisecond - time.Microsecond, 0, true},      // 4ms slot
		{limiters.PerSecond(1000), 1, 5 * time.Millisecond, 5 * time.Microsecond, false},  // 1ms slot × 5ms/1s
		{limiters.PerSecond(1000), 10, 5 * time.Millisecond, 50 * time.Microsecond, true}, // 10ms slot
		{limiters.PerSecond(100000), 1, 5 * time.Millisecond, time.Microsecond, false},    // 10µs slot: rounded up
	} {
		tol := LateTolerance(tt.rate, tt.cost)
		if tol != tt.tol {
			t.Errorf("step %d: LateTolerance(%s, %d) = %v, want %v", i, tt.rate, tt.cost, tol, tt.tol)
		}
		slack := PaceSlack(tt.rate, 1, tol)
		if tt.cost == 1 && slack != tt.slack {
			t.Errorf("step %d: PaceSlack(%s, 1, %v) = %v, want %v", i, tt.rate, tol, slack, tt.slack)
		}
		if iv := tt.rate.Interval(tt.cost); (tol < iv) != tt.under1Bin {
			t.Errorf("step %d: tolerance %v vs slot %v: under one slot = %v, want %v", i, tol, iv, tol < iv, tt.under1Bin)
		}
	}
}

// The bound PaceSlack buys: slots spaced interval + slack, each released up
// to tol late, put at most rate + 1 releases in any second.
func TestPaceSlackKeepsRatePlusOne(t *testing.T) {
	t.Parallel()
	for _, r := range []int64{300, 1000, 5000} {
		rate := limiters.PerSecond(r)
		tol := LateTolerance(rate, 1)
		step := rate.Interval(1) + PaceSlack(rate, 1, tol)
		// worst case: the slots before a window's start are all tol late,
		// those inside on time: the window [0, 1s) sees slots in (-tol, 1s)
		n := int64(0)
		for s := -tol + time.Nanosecond; s < time.Second; s += step {
			n++
		}
		if n > r+1 {
			t.Errorf("%d/s: %d slots in a second plus the %v tolerance, want at most %d", r, n, tol, r+1)
		}
	}
}

// TestCheckCalls: the rule for workers and caps on calls names the field
// in both words.
func TestCheckCalls(t *testing.T) {
	for _, c := range []struct {
		w, conc, key int
		lease        time.Duration
		field, goF   string
	}{
		{0, 0, 0, 0, "", ""},
		{10, 5, 2, 30 * time.Second, "", ""},
		{MaxWorkers + 1, 0, 0, 0, "workers", "Workers"},
		{0, -1, 0, 0, "concurrency", "Concurrency"},
		{0, 0, MaxConcurrency + 1, 0, "key_concurrency", "KeyConcurrency"},
		{0, 2, 3, 0, "key_concurrency", "KeyConcurrency"},
		{0, 0, 0, time.Minute, "lease", "LeaseTime"},
		{0, 0, 1, 500 * time.Millisecond, "lease", "LeaseTime"},
		{0, 1, 0, 2 * time.Hour, "lease", "LeaseTime"},
	} {
		p := CheckCalls(c.w, c.conc, c.key, c.lease)
		switch {
		case c.field == "" && p != nil:
			t.Errorf("%+v: %v, want nil", c, p)
		case c.field != "" && (p == nil || p.Field != c.field || p.GoField != c.goF):
			t.Errorf("%+v: %+v, want %s / %s", c, p, c.field, c.goF)
		}
	}
}

// TestCheckAdaptiveAndBatch: the adaptive rate's and the batch's rules
// name the field in both words.
func TestCheckAdaptiveAndBatch(t *testing.T) {
	one, five := limiters.PerSecond(1), limiters.PerSecond(5)
	for _, c := range []struct {
		p          *field.Problem
		field, goF string
	}{
		{CheckAdaptive(one, five, limiters.Limit{Rate: 1, Period: time.Nanosecond}, 0.5, 0), "step", "Step"},
		{CheckAdaptive(one, five, limiters.Limit{}, -0.1, 0), "decrease", "Decrease"},
		{CheckAdaptive(one, five, limiters.Limit{}, 0.5, -time.Second), "interval", "Interval"},
		{CheckBatch(10, -time.Second, 0), "max_delay", "MaxDelay"},
		{CheckBatch(10, 0, -time.Second), "grace", "Grace"},
		{CheckBatch(0, 0, 0), "max_rows", "MaxRows"},
	} {
		if c.p == nil || c.p.Field != c.field || !strings.HasPrefix(c.p.Error(), c.goF+": ") {
			t.Errorf("%v: want %s / %s named", c.p, c.field, c.goF)
		}
	}
	if p := CheckAdaptive(one, five, one, 0.75, time.Second); p != nil {
		t.Errorf("a fine adaptive rate: %v", p)
	}
	if p := CheckBatch(100, 2*time.Second, time.Second); p != nil {
		t.Errorf("a fine batch: %v", p)
	}
}
