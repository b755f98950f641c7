package limiters_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
)

// Hostile keys, costs, rates and windows: a clear error or correct
// behaviour, never a crash, never a key left without a TTL.
func TestHostileInput(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := context.Background()
	keys := []string{"{", "}", "}{", "{}", "a{b}c", "with spaces", "ünïcødé ключ 鍵", "", strings.Repeat("k", 10<<10), "\x00\xff", "*", "?[]"}
	for _, alg := range limiters.Algorithms() {
		lim := newLimiter(t, rdb, alg, limiters.PerSecond(3))
		for _, k := range keys {
			admitted := 0
			// One instant for all five calls: the answer must not depend
			// on a window edge or a refill falling between them.
			for i := 0; i < 5; i++ {
				res, err := lim.AllowAt(ctx, t0, k, 1)
				if err != nil {
					t.Fatalf("%s key %.20q: %v", alg, k, err)
				}
				if res.Allowed {
					admitted++
				}
			}
			if admitted != 3 {
				t.Errorf("%s key %.20q: admitted %d of 5, want 3", alg, k, admitted)
			}
		}
		checkTTLs(t, rdb, lim.Config().Prefix)
	}

	// costs
	lim := newLimiter(t, rdb, limiters.TokenBucket, limiters.PerSecond(10))
	for _, c := range []struct {
		cost int64
		want error
	}{{-1, limiters.ErrInvalidCost}, {math.MinInt64, limiters.ErrInvalidCost}, {11, limiters.ErrCostExceedsCapacity}, {math.MaxInt64, limiters.ErrCostExceedsCapacity}} {
		if _, err := lim.Allow(ctx, "c", c.cost); !errors.Is(err, c.want) {
			t.Errorf("cost %d: err = %v, want %v", c.cost, err, c.want)
		}
	}
	if res, err := lim.Allow(ctx, "c", 0); err != nil || !res.Allowed || res.Remaining != 10 {
		t.Errorf("cost 0 (a check): %v %v, want allowed with 10 remaining and nothing charged", res, err)
	}

	// rates and windows at the edges
	edges := []struct {
		name string
		l    limiters.Limit
		ok   bool
	}{
		{"1e9/s", limiters.PerSecond(1_000_000_000), true},
		{"1 per 31 years (1e-9/s)", limiters.Limit{Rate: 1, Period: 1e9 * time.Second, Burst: 1}, true},
		{"1ms window", limiters.Limit{Rate: 5, Period: time.Millisecond}, true},
		{"1 year window", limiters.Limit{Rate: 100, Period: 365 * 24 * time.Hour}, true},
		{"1e18 per 1ns", limiters.Limit{Rate: 1e18, Period: time.Nanosecond}, false},
		{"max burst", limiters.Limit{Rate: 1, Period: time.Hour, Burst: math.MaxInt64}, false},
	}
	for _, e := range edges {
		for _, alg := range limiters.Algorithms() {
			l, err := limiters.New(rdb, limiters.Config{Name: "edge", Algorithm: alg, Limit: e.l, Prefix: redistest.Prefix(t)})
			if err != nil {
				if e.ok && !(alg != limiters.TokenBucket && alg != limiters.LeakyBucket && strings.Contains(err.Error(), "too large")) {
					t.Errorf("%s %s: %v, want it accepted", e.name, alg, err)
				}
				if !errors.Is(err, limiters.ErrInvalidLimit) {
					t.Errorf("%s %s: err %v is not ErrInvalidLimit", e.name, alg, err)
				}
				continue
			}
			if !e.ok {
				t.Errorf("%s %s: accepted, want ErrInvalidLimit", e.name, alg)
				continue
			}
			res, err := l.Allow(ctx, "k", 1)
			if err != nil || !res.Allowed {
				t.Errorf("%s %s: first request %v %v, want allowed", e.name, alg, res, err)
			}
			checkTTLs(t, rdb, l.Config().Prefix)
		}
	}
}
