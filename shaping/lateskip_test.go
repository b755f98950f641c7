package shaping_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaper-io/shaper/internal/clocktest"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// A worker whose timer fires after its slot plus LateTolerance wastes the
// slot (shaper_shaping_late_skips_total, no release) and queues again; the
// next slot, woken on time, is released. The fake clock makes the late
// wake-up exact: the take reserves the slot, and the release sleeps until
// it on the fake clock (the slot plus the clock offset seeded at start);
// the skipped task goes back to the queue, and a take reserves its next
// slot.
func TestLateWakeUpSkipsItsSlot(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	reg := prometheus.NewRegistry()
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clk := clocktest.New(start)
	d := shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Registerer: reg, Clock: clk, ControlInterval: time.Hour, ShutdownTimeout: 5 * time.Second})
	rec := newRecorder()
	must(t, d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(2), Workers: 1, MaxWait: 5 * time.Second,
		LateTolerance: 100 * time.Millisecond, Handler: rec.handle}))
	defer d.Shutdown(context.Background())
	e := &env{t: t, rdb: rdb, prefix: prefix, p: queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix})}
	e.enqueue("api", 2, nil)
	must(t, d.Start())
	waitFor(t, 5*time.Second, "the first release (its slot is now)", func() bool { return rec.count() == 1 })

	// The release sleeps until the next slot, 500ms after the first, on
	// the fake clock: its slot plus the offset seeded at start, which is
	// less than 500ms on by what the start-up took on the wall clock
	// before the first take (the liveness loop's timers are due at 250ms,
	// 750ms, 1.75s and every 2s, the control loop's in an hour).
	due := workerTimer(t, clk, start, start, start.Add(600*time.Millisecond))
	clk.AdvanceTo(due.Add(300 * time.Millisecond)) // wakes 300ms behind the slot
	// the task went back to the queue and a take reserved its next slot,
	// at most 500ms after the skipped one; the release sleeps until it on
	// the fake clock, whose offset to Redis's the jump moved
	next := workerTimer(t, clk, start, clk.Now(), due.Add(700*time.Millisecond))
	if n := rec.count(); n != 1 {
		t.Fatalf("%d releases after a wake-up 300ms late (tolerance 100ms), want 1: the late slot must be skipped", n)
	}
	if n := gatherSum(t, reg, "shaper_shaping_late_skips_total"); n != 1 {
		t.Errorf("late skips = %v after one late wake-up, want 1", n)
	}
	clk.AdvanceTo(next) // on time
	waitFor(t, 5*time.Second, "the second release, in the next slot", func() bool { return rec.count() == 2 })
	if n := gatherSum(t, reg, "shaper_shaping_late_skips_total"); n != 1 {
		t.Errorf("late skips = %v after an on-time wake-up, want still 1", n)
	}
}

// workerTimer waits for a pending timer due after now, within (from, to),
// that is not the liveness loop's (250ms and 750ms after start, the fake
// clock's first time, then every 2s from 1.75s).
func workerTimer(t *testing.T, clk *clocktest.Fake, start, from, to time.Time) time.Time {
	t.Helper()
	liveness := func(p time.Time) bool {
		d := p.Sub(start)
		return d == 250*time.Millisecond || d == 750*time.Millisecond || d >= 1750*time.Millisecond && (d-1750*time.Millisecond)%(2*time.Second) == 0
	}
	var due time.Time
	waitFor(t, 5*time.Second, "a worker asleep until its slot", func() bool {
		now := clk.Now()
		for _, p := range clk.Pending() {
			if p.After(now) && p.After(from) && p.Before(to) && !liveness(p) {
				due = p
				return true
			}
		}
		return false
	})
	return due
}

// gatherSum is the sum of a metric family's counters in reg.
func gatherSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	must(t, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
