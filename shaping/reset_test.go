package shaping_test

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/shaping"
)

// resetSetup runs downstream api (at 20/s, answered by api) with quotas qs
// and n tasks enqueued, and returns the client, the prefix and the
// dispatcher.
func resetSetup(t *testing.T, api *standIn, qs []shaping.Quota, n int) (redis.UniversalClient, string, *shaping.Dispatcher) {
	t.Helper()
	r := startAnswerRun(t, shaping.Downstream{Rate: limiters.PerSecond(20), Quotas: qs}, api.URL(), "", n)
	return r.rdb, r.prefix, r.d
}

// exists reports whether key is in Redis.
func exists(t *testing.T, rdb redis.UniversalClient, key string) bool {
	t.Helper()
	n, err := rdb.Exists(context.Background(), key).Result()
	must(t, err)
	return n == 1
}

// heldSteady fails t unless the API's accepted count stays at want over
// two control intervals (the hold holds; nothing trickles out).
func heldSteady(t *testing.T, api *standIn, want int) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(time.Second); time.Now().Before(end); <-tick.C {
		if ok, _ := api.counts(); ok != want {
			t.Fatalf("%d accepted while held, want %d", ok, want)
		}
	}
}

// The downstream answers RateLimit-Remaining: 0 with a reset a day ahead:
// the announced limit holds it for MaxHold (1 h), not the day, and only
// that. Control.Reset reports exactly the announced limit (the bucket's
// key has expired, no quota is configured), and the held tasks go out at
// once, each once.
func TestResetClearsAnAnnouncedLimit(t *testing.T) {
	t.Parallel()
	const n = 10
	api := newStandIn(func(_ time.Time, acc []time.Time, h http.Header) int {
		if len(acc) == 0 {
			h.Set("RateLimit-Remaining", "0")
			h.Set("RateLimit-Reset", "86400")
		}
		return http.StatusOK
	})
	defer api.Close()
	rdb, prefix, d := resetSetup(t, api, nil, n)
	ks := keys.New(prefix)
	ctx := context.Background()
	waitFor(t, 5*time.Second, "the announced hold in Redis", func() bool {
		return rdb.PTTL(ctx, ks.Announced("api")).Val() > time.Minute
	})
	if ttl := rdb.PTTL(ctx, ks.Announced("api")).Val(); ttl > shaping.DefaultMaxHold+time.Second {
		t.Errorf("announced limit held for %s, want at most max_hold %s", ttl, shaping.DefaultMaxHold)
	}
	// the slots reserved before the answer go out; then nothing, and the
	// bucket's key expires (nothing is reserved while the hold lasts)
	waitFor(t, 5*time.Second, "the bucket's key to expire under the hold", func() bool { return !exists(t, rdb, ks.Bucket("api")) })
	held, _ := api.counts()
	if held >= n {
		t.Fatalf("all %d tasks accepted under a 1 h hold", held)
	}
	heldSteady(t, api, held)
	if l, err := d.Limits("api"); err != nil || l.Announced.Effect != "hold" {
		t.Errorf("Limits: %+v, %v; want the announced limit in effect as a hold", l.Announced, err)
	}

	c, err := shaping.NewControl(rdb, prefix).Reset(ctx, "api", nil)
	must(t, err)
	if want := (shaping.Cleared{Announced: true}); !reflect.DeepEqual(c, want) {
		t.Errorf("Reset = %+v, want %+v (only what was there)", c, want)
	}
	waitFor(t, 5*time.Second, "every task accepted after the reset", func() bool { ok, _ := api.counts(); return ok >= n })
	_, _, seen := api.snapshot()
	for i := range n {
		if c := seen[fmt.Sprint(i)]; c != 1 {
			t.Errorf("task %d delivered %d times, want once", i, c)
		}
	}
	if exists(t, rdb, ks.Announced("api")) {
		t.Error("the announced limit is still in Redis after the reset")
	}
}

// A spent quota (5 an hour) holds the rest of the tasks; Control.Reset
// reports exactly that quota and the held tasks go out at once. A reset
// with nothing to clear reports nothing.
func TestResetClearsASpentQuota(t *testing.T) {
	t.Parallel()
	const n, limit = 8, 5
	api := newStandIn(func(time.Time, []time.Time, http.Header) int { return http.StatusOK })
	defer api.Close()
	qs := []shaping.Quota{{Limit: limit, Per: time.Hour}}
	rdb, prefix, d := resetSetup(t, api, qs, n)
	ctx := context.Background()
	ctl := shaping.NewControl(rdb, prefix)

	waitFor(t, 5*time.Second, "the quota's 5 accepted", func() bool { ok, _ := api.counts(); return ok >= limit })
	waitFor(t, 5*time.Second, "the bucket's key to expire under the quota", func() bool {
		return !exists(t, rdb, keys.New(prefix).Bucket("api"))
	})
	heldSteady(t, api, limit)
	if l, err := d.Limits("api"); err != nil || l.HeldBy != "quota 5/1h0m0s" {
		t.Errorf("Limits.HeldBy = %q, %v; want quota 5/1h0m0s", l.HeldBy, err)
	}
	c, err := ctl.Reset(ctx, "api", qs)
	must(t, err)
	if want := (shaping.Cleared{Quotas: []string{"5/1h0m0s"}}); !reflect.DeepEqual(c, want) {
		t.Errorf("Reset = %+v, want %+v (only what was there)", c, want)
	}
	waitFor(t, 5*time.Second, "every task accepted after the reset", func() bool { ok, _ := api.counts(); return ok >= n })
	_, _, seen := api.snapshot()
	for i := range n {
		if c := seen[fmt.Sprint(i)]; c != 1 {
			t.Errorf("task %d delivered %d times, want once", i, c)
		}
	}
	// a slot wasted on the way (a task that reached its stocked slot too
	// late) gives its quota unit back just after: the count settles
	var used int64
	waitFor(t, 5*time.Second, fmt.Sprintf("the quota to count the %d releases after the reset", n-limit), func() bool {
		used, _ = quotaUnits(t, rdb, prefix, "api")
		return used == n-limit
	})

	// a downstream with no state: nothing found, nothing reported
	c, err = ctl.Reset(ctx, "idle", qs)
	must(t, err)
	if c.Any() || !reflect.DeepEqual(c, shaping.Cleared{}) {
		t.Errorf("Reset of a downstream with no state = %+v, want nothing cleared", c)
	}
}
