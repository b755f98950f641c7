package app_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/app"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/shaping"
)

// On the quick start's embedded Redis a reservation under quotas stays
// small: a sliding hourly quota's sub-window numbers are in the tens of
// millions, and shaping.lua keys its tables by them as strings, not as
// integers (which the embedded Lua would grow an array up to). Counted:
// the bytes the process allocated over 20 reservations.
func TestEmbeddedQuotaReservationStaysSmall(t *testing.T) {
	addr, stop, err := app.StartEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	b := shaping.NewBuckets(rdb, "emb")
	bucket := shaping.Bucket{Name: "api", Rate: limiters.PerSecond(100),
		Quotas: []shaping.Quota{{Limit: 1000, Per: time.Hour}, {Limit: 100000, Per: 24 * time.Hour, Aligned: true}}}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 20 {
		if _, err := b.Reserve(context.Background(), bucket, 1, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if mb := float64(after.TotalAlloc-before.TotalAlloc) / (1 << 20); mb > 64 {
		t.Errorf("20 reservations under quotas allocated %.0f MB on the embedded Redis, want a few", mb)
	} else {
		t.Logf("20 reservations under quotas: %.1f MB allocated", mb)
	}
}
