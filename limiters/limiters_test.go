package limiters_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/clocktest"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
)

// t0 is a window-aligned instant near now, so script TTLs stay realistic.
var t0 = time.Now().Truncate(time.Hour).Add(time.Hour)

type step struct {
	at        time.Duration // since t0
	key       string        // "" means "k"
	cost      int64
	allowed   bool
	remaining int64
	retry     time.Duration // checked when >= 0
}

func newLimiter(t *testing.T, rdb redis.UniversalClient, alg limiters.Algorithm, l limiters.Limit) *limiters.Redis {
	t.Helper()
	lim, err := limiters.New(rdb, limiters.Config{Name: "test", Algorithm: alg, Limit: l, Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return lim
}

// checkTTLs asserts that every key under the limiter's prefix has a TTL.
func checkTTLs(t *testing.T, rdb redis.UniversalClient, prefix string) {
	t.Helper()
	ctx := context.Background()
	keys, err := redistest.ScanKeys(ctx, rdb, prefix+"*")
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	for _, k := range keys {
		ttl, err := rdb.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatalf("PTTL %s: %v", k, err)
		}
		if ttl <= 0 && ttl != -2*time.Nanosecond && ttl != -2 { // -2: expired meanwhile
			t.Errorf("key %q has no TTL (PTTL %v)", k, ttl)
		}
	}
}

func runSteps(t *testing.T, alg limiters.Algorithm, l limiters.Limit, steps []step) {
	t.Helper()
	rdb := redistest.Client(t)
	playSteps(t, rdb, newLimiter(t, rdb, alg, l), steps)
}

func playSteps(t *testing.T, rdb redis.UniversalClient, lim *limiters.Redis, steps []step) {
	t.Helper()
	ctx := context.Background()
	for i, s := range steps {
		key := s.key
		if key == "" {
			key = "k"
		}
		res, err := lim.AllowAt(ctx, t0.Add(s.at), key, s.cost)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if res.Allowed != s.allowed {
			t.Errorf("step %d (at %v cost %d): allowed = %v, want %v (%v)", i, s.at, s.cost, res.Allowed, s.allowed, res)
		}
		if res.Remaining != s.remaining {
			t.Errorf("step %d (at %v): remaining = %d, want %d", i, s.at, res.Remaining, s.remaining)
		}
		if s.retry >= 0 && res.RetryAfter != s.retry {
			t.Errorf("step %d (at %v): retry after = %v, want %v", i, s.at, res.RetryAfter, s.retry)
		}
		checkTTLs(t, rdb, lim.Config().Prefix)
	}
}

const ms = time.Millisecond

func TestFixedWindowSteps(t *testing.T) {
	t.Parallel()
	runSteps(t, limiters.FixedWindow, limiters.PerSecond(3), []step{
		{at: 0, cost: 1, allowed: true, remaining: 2},
		{at: 100 * ms, cost: 2, allowed: true, remaining: 0},
		{at: 200 * ms, cost: 1, allowed: false, remaining: 0, retry: 800 * ms},
		{at: 999 * ms, cost: 1, allowed: false, remaining: 0, retry: 1 * ms},
		{at: 1000 * ms, cost: 1, allowed: true, remaining: 2},
		{at: 1500 * ms, cost: 3, allowed: false, remaining: 2, retry: 500 * ms}, // a rejected cost charges nothing
		{at: 1500 * ms, cost: 2, allowed: true, remaining: 0},
	})
}

// The known flaw: a fixed window lets 2× the limit through across an edge.
func TestFixedWindowEdgeBurst(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	lim := newLimiter(t, rdb, limiters.FixedWindow, limiters.PerSecond(10))
	ctx := context.Background()
	admitted := 0
	for _, at := range []time.Duration{900 * ms, 1000 * ms} { // 100ms apart, two windows
		for i := 0; i < 15; i++ {
			res, err := lim.AllowAt(ctx, t0.Add(at), "edge", 1)
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed {
				admitted++
			}
		}
	}
	if admitted != 20 {
		t.Fatalf("admitted %d within 100ms across a window edge, want 20 (2× the limit of 10)", admitted)
	}
	// The sliding log does not have the flaw.
	log := newLimiter(t, rdb, limiters.SlidingLog, limiters.PerSecond(10))
	admitted = 0
	for _, at := range []time.Duration{900 * ms, 1000 * ms} {
		for i := 0; i < 15; i++ {
			res, err := log.AllowAt(ctx, t0.Add(at), "edge", 1)
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed {
				admitted++
			}
		}
	}
	if admitted != 10 {
		t.Fatalf("sliding log admitted %d within 100ms, want 10", admitted)
	}
}

func TestSlidingLogSteps(t *testing.T) {
	t.Parallel()
	runSteps(t, limiters.SlidingLog, limiters.PerSecond(3), []step{
		{at: 0, cost: 1, allowed: true, remaining: 2},
		{at: 100 * ms, cost: 1, allowed: true, remaining: 1},
		{at: 200 * ms, cost: 1, allowed: true, remaining: 0},
		{at: 300 * ms, cost: 1, allowed: false, remaining: 0, retry: 700 * ms},  // oldest (t0) leaves at 1000ms
		{at: 1000 * ms, cost: 1, allowed: true, remaining: 0},                   // entry at exactly now-window is out
		{at: 1050 * ms, cost: 2, allowed: false, remaining: 0, retry: 150 * ms}, // needs 2 out: 100ms and 200ms entries
		{at: 1200 * ms, cost: 2, allowed: true, remaining: 0},
		{at: 1200 * ms, cost: 0, allowed: true, remaining: 0},
	})
}

func TestSlidingCounterSteps(t *testing.T) {
	t.Parallel()
	runSteps(t, limiters.SlidingCounter, limiters.PerSecond(10), []step{
		{at: 500 * ms, cost: 10, allowed: true, remaining: 0},                  // window 0 full
		{at: 600 * ms, cost: 1, allowed: false, remaining: 0, retry: 500 * ms}, // cur=10: next window, 10*(1-e)+1 <= 10 at e >= 0.1 → 1100ms
		// window 1 at 250ms: estimate = 10*0.75 + 0 = 7.5
		{at: 1250 * ms, cost: 2, allowed: true, remaining: 0},                  // 7.5+2 = 9.5 <= 10; remaining floor(0.5)
		{at: 1250 * ms, cost: 1, allowed: false, remaining: 0, retry: 50 * ms}, // 10.5 > 10; fits once prev weight <= 7 → at 300ms
		{at: 1300 * ms, cost: 1, allowed: true, remaining: 0},                  // 10*0.7 + 2 + 1 = 10
		{at: 2999 * ms, cost: 7, allowed: true, remaining: 2},                  // 3*0.001 + 7 = 7.003 <= 10: remaining floor(2.997)
	})
}

func TestTokenBucketSteps(t *testing.T) {
	t.Parallel()
	runSteps(t, limiters.TokenBucket, limiters.PerSecond(10).WithBurst(5), []step{
		{at: 0, cost: 5, allowed: true, remaining: 0},
		{at: 0, cost: 1, allowed: false, remaining: 0, retry: 100 * ms},
		{at: 100 * ms, cost: 1, allowed: true, remaining: 0},
		{at: 150 * ms, cost: 1, allowed: false, remaining: 0, retry: 50 * ms}, // 0.5 tokens
		{at: 200 * ms, cost: 1, allowed: true, remaining: 0},                  // exactly 1.0: fixed point, no drift
		{at: 10 * time.Second, cost: 1, allowed: true, remaining: 4},          // refill capped at 5
		{at: 10 * time.Second, cost: 5, allowed: false, remaining: 4, retry: 100 * ms},
	})
}

func TestTokenBucketThirds(t *testing.T) {
	t.Parallel()
	// 3/s: one token every 333.33ms. A float refill would drift; fixed point
	// makes the 3rd token arrive at exactly 1s.
	runSteps(t, limiters.TokenBucket, limiters.PerSecond(3).WithBurst(1), []step{
		{at: 0, cost: 1, allowed: true, remaining: 0},
		{at: 333 * ms, cost: 1, allowed: false, remaining: 0, retry: -1},
		{at: 334 * ms, cost: 1, allowed: true, remaining: 0},
		{at: 1000 * ms, cost: 1, allowed: true, remaining: 0},
	})
}

func TestLeakyBucketSteps(t *testing.T) {
	t.Parallel()
	runSteps(t, limiters.LeakyBucket, limiters.Limit{Rate: 2, Period: time.Second, Burst: 3}, []step{
		{at: 0, cost: 3, allowed: true, remaining: 0},
		{at: 0, cost: 1, allowed: false, remaining: 0, retry: 500 * ms},
		{at: 250 * ms, cost: 1, allowed: false, remaining: 0, retry: 250 * ms}, // level 2.5: 2.5+1 > 3 (level<capacity would overfill)
		{at: 500 * ms, cost: 1, allowed: true, remaining: 0},                   // level 2: 2+1 <= 3, exactly fits
		{at: 5 * time.Second, cost: 1, allowed: true, remaining: 2},
	})
}

func TestSubSecondWindowsKeepTTL(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	for _, alg := range limiters.Algorithms() {
		lim := newLimiter(t, rdb, alg, limiters.Limit{Rate: 5, Period: time.Millisecond})
		for i := 0; i < 3; i++ {
			if _, err := lim.Allow(context.Background(), "sub", 1); err != nil {
				t.Fatalf("%s: %v", alg, err)
			}
		}
		checkTTLs(t, rdb, lim.Config().Prefix)
	}
}

func TestValidation(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	bad := []struct {
		name string
		cfg  limiters.Config
		want string
	}{
		{"zero rate", limiters.Config{Name: "x", Limit: limiters.Limit{Rate: 0, Period: time.Second}}, "Rate must be positive, got 0"},
		{"negative rate", limiters.Config{Name: "x", Limit: limiters.Limit{Rate: -5, Period: time.Second}}, "Rate must be positive, got -5"},
		{"zero period", limiters.Config{Name: "x", Limit: limiters.Limit{Rate: 1}}, "Period must be at least 1µs, got 0s"},
		{"negative burst", limiters.Config{Name: "x", Limit: limiters.Limit{Rate: 1, Period: time.Second, Burst: -1}}, "Burst must not be negative, got -1"},
		{"bad name", limiters.Config{Name: "a b", Limit: limiters.PerSecond(1)}, `Name must be 1-128 of [A-Za-z0-9._-], got "a b"`},
		{"bad algorithm", limiters.Config{Name: "x", Algorithm: "gcra", Limit: limiters.PerSecond(1)}, `unknown algorithm "gcra"`},
		{"window burst", limiters.Config{Name: "x", Algorithm: limiters.FixedWindow, Limit: limiters.PerSecond(1).WithBurst(5)}, "Burst must be 0 or equal Rate"},
		{"too large", limiters.Config{Name: "x", Limit: limiters.Limit{Rate: 1, Period: 100 * 365 * 24 * time.Hour, Burst: 1 << 40}}, "too large for exact arithmetic"},
	}
	for _, b := range bad {
		_, err := limiters.New(rdb, b.cfg)
		if !errors.Is(err, limiters.ErrInvalidLimit) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: err = %v, want ErrInvalidLimit containing %q", b.name, err, b.want)
		}
	}
	for _, s := range []string{"", "0", "-5", "5.", "NaN", "NaN/s", "Inf/s", "-1/s", "0/s", "1/x", "1/-5s", "1.5.5/s", "abc/m", "1.1234567/s", "1/0s"} {
		if _, err := limiters.ParseLimit(s); !errors.Is(err, limiters.ErrInvalidLimit) {
			t.Errorf("ParseLimit(%q): err = %v, want ErrInvalidLimit", s, err)
		}
	}
	lim := newLimiter(t, rdb, limiters.TokenBucket, limiters.PerSecond(10))
	if _, err := lim.Allow(context.Background(), "k", 11); !errors.Is(err, limiters.ErrCostExceedsCapacity) {
		t.Errorf("cost 11 > capacity 10: err = %v, want ErrCostExceedsCapacity", err)
	}
	if _, err := lim.Allow(context.Background(), "k", -1); !errors.Is(err, limiters.ErrInvalidCost) {
		t.Errorf("cost -1: err = %v, want ErrInvalidCost", err)
	}
}

func TestParseLimit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want limiters.Limit
	}{
		{"50/s", limiters.Limit{Rate: 50, Period: time.Second, Burst: 50}},
		{"3000/m", limiters.Limit{Rate: 3000, Period: time.Minute, Burst: 3000}},
		{"2.5/s", limiters.Limit{Rate: 5, Period: 2 * time.Second, Burst: 5}},
		{"10/1500ms", limiters.Limit{Rate: 10, Period: 1500 * time.Millisecond, Burst: 10}},
		{" 7 / h ", limiters.Limit{Rate: 7, Period: time.Hour, Burst: 7}},
		// a bare number is per second
		{"20", limiters.Limit{Rate: 20, Period: time.Second, Burst: 20}},
		{" 20 ", limiters.Limit{Rate: 20, Period: time.Second, Burst: 20}},
		{"2.5", limiters.Limit{Rate: 5, Period: 2 * time.Second, Burst: 5}},
		// d is a unit, alone or with a count, as in every duration
		{"1/d", limiters.Limit{Rate: 1, Period: 24 * time.Hour, Burst: 1}},
		{"1/day", limiters.Limit{Rate: 1, Period: 24 * time.Hour, Burst: 1}},
		{"1/1d", limiters.Limit{Rate: 1, Period: 24 * time.Hour, Burst: 1}},
		{"3/2d", limiters.Limit{Rate: 3, Period: 48 * time.Hour, Burst: 3}},
		{"1/1d12h", limiters.Limit{Rate: 1, Period: 36 * time.Hour, Burst: 1}},
	} {
		got, err := limiters.ParseLimit(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseLimit(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	if s := limiters.PerSecond(10).WithBurst(20).String(); s != "10/s (burst 20)" {
		t.Errorf("String() = %q", s)
	}
}

// 64 goroutines on one key admit exactly the limit, never more.
func TestConcurrentExactLimit(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	for _, alg := range []limiters.Algorithm{limiters.FixedWindow, limiters.SlidingLog, limiters.TokenBucket, limiters.SlidingCounter, limiters.LeakyBucket} {
		// window/refill of an hour: nothing refills during the test
		lim := newLimiter(t, rdb, alg, limiters.PerHour(500))
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 64; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					res, err := lim.Allow(context.Background(), "hot", 1)
					if err != nil {
						t.Error(err)
						return
					}
					if res.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		// fixed window: an hour-aligned window could roll over mid-test; the
		// count is still bounded by 2×, but exactness needs one window.
		if got := admitted.Load(); got != 500 && !(alg == limiters.FixedWindow && got <= 1000) {
			t.Errorf("%s: 64 goroutines × 20 admitted %d, want exactly 500", alg, got)
		}
	}
}

func TestRefundEveryAlgorithm(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := context.Background()
	for _, alg := range limiters.Algorithms() {
		lim := newLimiter(t, rdb, alg, limiters.PerHour(5))
		res, err := lim.Allow(ctx, "r", 3)
		if err != nil || !res.Allowed {
			t.Fatalf("%s: allow: %v %v", alg, res, err)
		}
		if err := res.Cancel(ctx); err != nil {
			t.Fatalf("%s: refund: %v", alg, err)
		}
		// A second Cancel (of the Result or a copy) gives nothing back.
		if err := res.Cancel(ctx); err != nil {
			t.Fatalf("%s: second refund: %v", alg, err)
		}
		res, err = lim.Allow(ctx, "r", 5)
		if err != nil || !res.Allowed {
			t.Errorf("%s: after refund, the full capacity of 5 should fit: %v %v", alg, res, err)
		}
		if p, err := lim.Peek(ctx, "r", 1); err != nil || p.Allowed {
			t.Errorf("%s: after one refund and a charge of 5, Peek(1) = %v, %v; want rejected (refunded once, not twice)", alg, p, err)
		}
		checkTTLs(t, rdb, lim.Config().Prefix)
	}
}

// Config.Clock decides on that clock instead of Redis TIME: on a fake
// clock, a window filled at t0 stays full however long the test takes, and
// a rejection's RetryAfter, advanced on the fake clock, is exactly when
// the next unit fits (the sliding counter's is half-way into the next
// window, where the estimate has room); hours later every window is empty.
// No wall-clock wait.
func TestConfigClockDrivesWindows(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	start := time.Now().Add(-3 * time.Hour).Truncate(time.Hour)
	for _, alg := range limiters.Algorithms() {
		clk := clocktest.New(start)
		lim, err := limiters.New(rdb, limiters.Config{Name: "clock_" + string(alg), Algorithm: alg, Limit: limiters.PerHour(2),
			Prefix: prefix, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			if res, err := lim.Allow(ctx, "k", 1); err != nil || !res.Allowed {
				t.Fatalf("%s: step %d: got %v, %v; want allowed", alg, i, res, err)
			}
		}
		res, err := lim.Allow(ctx, "k", 1)
		if err != nil || res.Allowed || res.RetryAfter <= 0 || res.RetryAfter > 2*time.Hour {
			t.Fatalf("%s: third at t0: got %v, %v; want rejected with a RetryAfter in (0, 2h]", alg, res, err)
		}
		clk.Advance(res.RetryAfter - time.Millisecond)
		if p, err := lim.Peek(ctx, "k", 1); err != nil || p.Allowed {
			t.Errorf("%s: 1ms before RetryAfter %v: got %v, %v; want still rejected", alg, res.RetryAfter, p, err)
		}
		clk.Advance(time.Millisecond)
		if got, err := lim.Allow(ctx, "k", 1); err != nil || !got.Allowed {
			t.Errorf("%s: at RetryAfter %v on the fake clock: got %v, %v; want allowed", alg, res.RetryAfter, got, err)
		}
		clk.AdvanceTo(start.Add(4 * time.Hour))
		if got, err := lim.Allow(ctx, "k", 2); err != nil || !got.Allowed {
			t.Errorf("%s: four hours after t0: got %v, %v; want allowed (windows over, bucket refilled)", alg, got, err)
		}
	}
}
