package shaping_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/shaping"
)

// quotaUnits is every unit downstream ds's quotas count in Redis, summed
// over their fields (windows), and the quota keys found.
func quotaUnits(t *testing.T, rdb redis.UniversalClient, prefix, ds string) (int64, []string) {
	t.Helper()
	ctx := context.Background()
	ks, err := redistest.ScanKeys(ctx, rdb, keys.New(prefix).Quota(ds, "*"))
	must(t, err)
	sum := int64(0)
	for _, k := range ks {
		h, err := rdb.HGetAll(ctx, k).Result()
		must(t, err)
		for f, v := range h {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("quota %s field %s = %q, not a count", k, f, v)
			}
			sum += n
		}
	}
	return sum, ks
}

// costOnFirst answers the first call with X-Request-Cost: cost, the
// others with no cost (they settle at their reserved 1).
func costOnFirst(cost string) *standIn {
	return newStandIn(func(_ time.Time, acc []time.Time, h http.Header) int {
		if len(acc) == 0 {
			h.Set("X-Request-Cost", cost)
		}
		return http.StatusOK
	})
}

// One answer reporting a huge cost against a downstream with a daily
// aligned quota of 1000 spends only the cost cap, min(MaxCost, the
// smallest quota, what the rate spends in MaxHold), of the day's quota:
// at 10/s the default MaxCost (a second of the rate) makes it 10; an
// explicit MaxCost of 1000 with MaxHold 3s makes it 30. The quota then
// counts the cap plus one unit per other task, the cut is counted, and
// the tasks keep flowing: no gap between two deliveries is longer than
// the cap takes at the rate (plus slack for a loaded machine).
func TestReportedCostWithDailyQuota(t *testing.T) {
	t.Parallel()
	for _, step := range []struct {
		name    string
		cost    string
		maxCost int64
		maxHold time.Duration
		cap     int64
	}{
		{"1e18, default max_cost", "1000000000000000000", 0, 0, 10},
		{"MaxInt64, default max_cost", "9223372036854775807", 0, 0, 10},
		{"1e18, max_cost 1000, max_hold 3s", "1000000000000000000", 1000, 3 * time.Second, 30},
	} {
		t.Run(step.name, func(t *testing.T) {
			t.Parallel()
			const n, rate = 20, 10
			api := costOnFirst(step.cost)
			defer api.Close()
			run := startAnswerRun(t, shaping.Downstream{Rate: limiters.PerSecond(rate), MaxCost: step.maxCost, MaxHold: step.maxHold,
				Quotas: []shaping.Quota{{Limit: 1000, Per: 24 * time.Hour, Aligned: true}}}, api.URL(), "X-Request-Cost", n)
			rdb, prefix, d, reg := run.rdb, run.prefix, run.d, run.reg
			capWait := time.Duration(step.cap-1) * time.Second / rate
			waitFor(t, 2*time.Second+capWait+4*time.Second, "every task accepted", func() bool {
				ok, _ := api.counts()
				return ok >= n
			})
			want := step.cap + n - 1
			var got int64
			waitFor(t, 3*time.Second, "the quota to count the cap and the other tasks", func() bool {
				got, _ = quotaUnits(t, rdb, prefix, "api")
				return got == want
			})
			if got >= 1000 {
				t.Errorf("one answer spent the day's quota: %d of 1000 used", got)
			}
			acc, _, seen := api.snapshot()
			for i := range n {
				if c := seen[fmt.Sprint(i)]; c != 1 {
					t.Errorf("task %d delivered %d times, want once", i, c)
				}
			}
			gap := time.Duration(0)
			for i := 1; i < len(acc); i++ {
				gap = max(gap, acc[i].Sub(acc[i-1]))
			}
			if bound := capWait + 2*time.Second; gap > bound {
				t.Errorf("longest gap between deliveries %s, want at most %s (the cap of %d at %d/s, plus slack)",
					gap.Round(time.Millisecond), bound, step.cap, rate)
			}
			l, err := d.Limits("api")
			must(t, err)
			if l.Clamp.What != "cost_high" || l.Clamp.Applied != strconv.FormatInt(step.cap, 10) || l.Clamp.Said != step.cost {
				t.Errorf("last clamp %+v, want cost_high %s cut to %d", l.Clamp, step.cost, step.cap)
			}
			if c := counterSum(t, reg, "shaper_shaping_answer_clamped_total", "what", "cost_high"); c != 1 {
				t.Errorf("shaper_shaping_answer_clamped_total{what=cost_high} = %v, want 1", c)
			}
		})
	}
}

// Under a sliding quota of a leap year ({limit: 1000, per: 8784h}) an
// answer reporting 2000 settles at the cap (MaxCost 1000, the quota's
// limit) and leaves the quota key's TTL where its reservation put it:
// at most the period, one sub-window (Per/QuotaSubWindows, the time a
// sliding unit may count past Per), the guard and the scripts' 1 s
// margin; at least the period (the unit must count that long).
func TestReportedCostKeepsQuotaTTL(t *testing.T) {
	t.Parallel()
	const per = 8784 * time.Hour
	api := costOnFirst("2000")
	defer api.Close()
	run := startAnswerRun(t, shaping.Downstream{Rate: limiters.PerSecond(10), MaxCost: 1000,
		Quotas: []shaping.Quota{{Limit: 1000, Per: per}}}, api.URL(), "X-Request-Cost", 1)
	rdb, prefix := run.rdb, run.prefix
	waitFor(t, 5*time.Second, "the task accepted", func() bool { ok, _ := api.counts(); return ok >= 1 })
	var ks []string
	waitFor(t, 3*time.Second, "the quota to count the cap", func() bool {
		var got int64
		got, ks = quotaUnits(t, rdb, prefix, "api")
		return got == 1000
	})
	if len(ks) != 1 {
		t.Fatalf("quota keys %q, want one", ks)
	}
	ttl := rdb.PTTL(context.Background(), ks[0]).Val()
	sub := per / shaping.QuotaSubWindows
	// the guard is the late tolerance (50 ms at 10/s) plus the quota's
	// 20 ms margin: 1 s bounds it
	if hi := per + sub + time.Second + time.Second; ttl > hi || ttl < per {
		t.Errorf("quota key PTTL %s (%.1f days), want between the period %s and %s", ttl, ttl.Hours()/24, per, hi)
	}
}
