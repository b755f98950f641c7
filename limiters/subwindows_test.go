package limiters_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
)

const us = time.Microsecond

func newSubWindows(t *testing.T, rdb redis.UniversalClient, l limiters.Limit, n int) *limiters.Redis {
	t.Helper()
	lim, err := limiters.New(rdb, limiters.Config{Name: "test", Algorithm: limiters.SlidingCounter, Limit: l,
		SubWindows: n, Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return lim
}

// 10/s in 10 sub-windows of 100ms.
func TestSubWindowsSteps(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	playSteps(t, rdb, newSubWindows(t, rdb, limiters.PerSecond(10), 10), []step{
		{at: 50 * ms, cost: 4, allowed: true, remaining: 6},
		{at: 150 * ms, cost: 6, allowed: true, remaining: 0},
		// In sub-window 10 the 4 of sub-window 0 weigh 4*(1-e), and
		// 4*(1-e) + 6 + 1 <= 10 from e = 1/4: at 1025ms.
		{at: 200 * ms, cost: 1, allowed: false, remaining: 0, retry: 825 * ms},
		{at: 1025 * ms, cost: 1, allowed: true, remaining: 0},
		// sub-window 11, e = 1/2: 6*0.5 + 1 counted
		{at: 1150 * ms, cost: 6, allowed: true, remaining: 0},
		// 6*(1-e) + 1 + 6 + 1 <= 10 from e = 2/3: 1166.667ms, rounded up
		{at: 1150 * ms, cost: 1, allowed: false, remaining: 0, retry: 16667 * us},
		{at: 1150*ms + 16667*us, cost: 1, allowed: true, remaining: 0},
		{at: 5 * time.Second, cost: 10, allowed: true, remaining: 0},
		{at: 5 * time.Second, cost: 0, allowed: true, remaining: 0},
	})
}

// 60 sub-windows of a second are 16666.67µs each: their edges fall between
// microseconds, and Retry-After is exact all the same.
func TestSubWindowsFractionalEdges(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	playSteps(t, rdb, newSubWindows(t, rdb, limiters.PerSecond(3), 60), []step{
		{at: 16666 * us, cost: 3, allowed: true, remaining: 0}, // the last µs of sub-window 0
		// Sub-window 0 is weighted in sub-window 60 (from 1s): 3*(1-e) + 1
		// <= 3 from e = 1/3, at 1s + 16666.67µs/3 = 1005555.56µs.
		{at: 16667 * us, cost: 1, allowed: false, remaining: 0, retry: (1005556 - 16667) * us},
		{at: 1005555 * us, cost: 1, allowed: false, remaining: 0, retry: 1 * us},
		{at: 1005556 * us, cost: 1, allowed: true, remaining: 0},
	})
}

// The precision the sub-windows buy: 10 requests at 990ms, then as many as
// are allowed at 1.5s. In the sliding second (0.5s, 1.5s] the two-window
// counter lets 15 through (it spreads the 10 over its whole previous
// window and counts only half of them); with 10 sub-windows the 10 sit in
// one sub-window that is still wholly inside, so nothing more passes, as
// with the exact sliding log.
func TestSubWindowsTighterThanTwoWindows(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		lim  *limiters.Redis
		want int
	}{
		{"two windows", newLimiter(t, rdb, limiters.SlidingCounter, limiters.PerSecond(10)), 15},
		{"10 sub-windows", newSubWindows(t, rdb, limiters.PerSecond(10), 10), 10},
		{"sliding log", newLimiter(t, rdb, limiters.SlidingLog, limiters.PerSecond(10)), 10},
	} {
		admitted := 0
		for _, at := range []time.Duration{990 * ms, 1500 * ms} {
			for i := 0; i < 10; i++ {
				res, err := c.lim.AllowAt(ctx, t0.Add(at), "k", 1)
				if err != nil {
					t.Fatal(err)
				}
				if res.Allowed {
					admitted++
				}
			}
		}
		if admitted != c.want {
			t.Errorf("%s: admitted %d in (0.5s, 1.5s] at 10/s, want %d", c.name, admitted, c.want)
		}
	}
}

// One HASH per key, at most N+1 fields however long it runs, a TTL of a
// window and a sub-window (plus the margin) after every call, and a
// rejection writes nothing.
func TestSubWindowsMemoryAndTTL(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := context.Background()
	lim := newSubWindows(t, rdb, limiters.PerSecond(50), 10)
	key := lim.Key("k")
	if !strings.Contains(key, "{swc10:test:k}") {
		t.Errorf("Key = %q, want the swc10 family in its hash tag", key)
	}
	for i := 0; i < 30; i++ { // three windows, one call per sub-window
		at := time.Duration(i)*100*ms + 30*ms
		res, err := lim.AllowAt(ctx, t0.Add(at), "k", 1)
		if err != nil || !res.Allowed {
			t.Fatalf("call %d: %v %v", i, res, err)
		}
		if n, want := rdb.HLen(ctx, key).Val(), int64(min(i+1, 11)); n != want {
			t.Errorf("call %d: HLEN %d, want %d", i, n, want)
		}
		// the newest field counts until 1.1s after its sub-window starts
		if ttl, want := rdb.PTTL(ctx, key).Val(), 1070*ms+time.Second; ttl > want || ttl < want-100*ms {
			t.Errorf("call %d: PTTL %v, want about %v", i, ttl, want)
		}
		checkTTLs(t, rdb, lim.Config().Prefix)
	}
	if typ := rdb.Type(ctx, key).Val(); typ != "hash" {
		t.Errorf("TYPE %s, want hash", typ)
	}
	full := newSubWindows(t, rdb, limiters.PerSecond(5), 10)
	if res, err := full.AllowAt(ctx, t0, "f", 5); err != nil || !res.Allowed {
		t.Fatalf("fill: %v %v", res, err)
	}
	before, _ := rdb.Dump(ctx, full.Key("f")).Result()
	ttl0 := rdb.PTTL(ctx, full.Key("f")).Val()
	res, err := full.AllowAt(ctx, t0.Add(500*ms), "f", 1)
	if err != nil || res.Allowed {
		t.Fatalf("over the limit: %v %v, want rejected", res, err)
	}
	after, _ := rdb.Dump(ctx, full.Key("f")).Result()
	if ttl := rdb.PTTL(ctx, full.Key("f")).Val(); before != after || ttl > ttl0 {
		t.Errorf("a rejection wrote: DUMP changed %v, PTTL %v then %v", before != after, ttl0, ttl)
	}
}

func TestSubWindowsRefundAndCost(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := context.Background()
	lim := newSubWindows(t, rdb, limiters.PerHour(5), 60)
	res, err := lim.Allow(ctx, "r", 3)
	if err != nil || !res.Allowed {
		t.Fatalf("allow: %v %v", res, err)
	}
	if err := res.Cancel(ctx); err != nil {
		t.Fatalf("refund: %v", err)
	}
	if n := rdb.HLen(ctx, lim.Key("r")).Val(); n != 0 {
		t.Errorf("after refunding the only charge: HLEN %d, want 0", n)
	}
	if res, err = lim.Allow(ctx, "r", 5); err != nil || !res.Allowed {
		t.Errorf("after refund, the full limit of 5 should fit: %v %v", res, err)
	}
	checkTTLs(t, rdb, lim.Config().Prefix)
	if _, err := lim.Allow(ctx, "r", 6); !errors.Is(err, limiters.ErrCostExceedsCapacity) {
		t.Errorf("cost 6 > limit 5: err = %v, want ErrCostExceedsCapacity", err)
	}
}

func TestSubWindowsValidation(t *testing.T) {
	t.Parallel()
	sc := limiters.SlidingCounter
	for _, b := range []struct {
		name string
		alg  limiters.Algorithm
		l    limiters.Limit
		n    int
		want string
	}{
		{"one", sc, limiters.PerSecond(10), 1, "sub-windows must be 2 to 1000 (or 0 for the two-window counter), got 1"},
		{"negative", sc, limiters.PerSecond(10), -3, "got -3"},
		{"too many", sc, limiters.PerSecond(10), 1001, "got 1001"},
		{"other algorithm", limiters.TokenBucket, limiters.PerSecond(10), 10, "10 sub-windows need algorithm sliding_counter, got token_bucket"},
		{"default algorithm", "", limiters.PerSecond(10), 10, "got token_bucket"},
		{"window too short", sc, limiters.Limit{Rate: 1, Period: 50 * us}, 60, "a window of 50µs cannot hold 60 sub-windows"},
		{"window too long", sc, limiters.Limit{Rate: 1, Period: 10 * 365 * 24 * time.Hour}, 1000, "too long for exact arithmetic"},
	} {
		_, err := limiters.New(nil, limiters.Config{Name: "x", Algorithm: b.alg, Limit: b.l, SubWindows: b.n})
		if !errors.Is(err, limiters.ErrInvalidLimit) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: err = %v, want ErrInvalidLimit containing %q", b.name, err, b.want)
		}
	}
	for _, n := range []int{0, 2, 1000} {
		if _, err := limiters.New(nil, limiters.Config{Name: "x", Algorithm: sc, Limit: limiters.PerMinute(100), SubWindows: n}); err != nil {
			t.Errorf("%d sub-windows of a minute: %v", n, err)
		}
	}
}
