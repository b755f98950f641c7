package shaping_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// histogram reads a histogram series of reg (count and sum).
func histogram(t *testing.T, reg *prometheus.Registry, name string) (count uint64, sum float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				h := m.GetHistogram()
				count += h.GetSampleCount()
				sum += h.GetSampleSum()
			}
		}
	}
	return count, sum
}

func gauge(reg *prometheus.Registry, name string) (float64, bool) {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// In shadow, shaping releases every task at once but charges the bucket as
// enforcing would, so shaper_shaping_shadow_wait_seconds holds the waits
// enforcing would have given (20 tasks at 5/s: 0, 0.2s, … 3.8s). Switched
// to enforce, the bucket starts empty and releases are paced again.
func TestShadowShapingReleasesAtOnceAndCountsTheWait(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	reg := prometheus.NewRegistry()
	d := shaping.New(rdb, shaping.Config{Prefix: prefix, Registerer: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(func() { d.Shutdown(context.Background()) })
	rec := newRecorder()
	must(t, d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(5), ShapingMode: limiters.Shadow, Handler: rec.handle}))
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix})
	t.Cleanup(func() { p.Close() })
	for i := range 20 {
		if _, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	must(t, d.Start())
	waitFor(t, 10*time.Second, "20 releases", func() bool { return rec.count() >= 20 })
	rec.mu.Lock()
	span := rec.times[len(rec.times)-1].Sub(rec.times[0])
	rec.mu.Unlock()
	if span > 2*time.Second {
		t.Errorf("20 releases took %s in shadow, want well under the 3.8s enforcing takes", span)
	}
	n, sum := histogram(t, reg, "shaper_shaping_shadow_wait_seconds")
	// Σ i×0.2s for i < 20 is 38s, less the time the releases took.
	t.Logf("shadow: 20 releases in %s; would-have-waited sum %.2fs over %d tasks", span.Round(time.Millisecond), sum, n)
	if n != 20 || sum < 34 || sum > 38.05 {
		t.Errorf("shadow waits: %d observations summing to %.2fs, want 20 summing to about 38s", n, sum)
	}
	if v, ok := gauge(reg, "shaper_shaping_shadow_mode"); !ok || v != 1 {
		t.Errorf("shaper_shaping_shadow_mode = %v (found %v), want 1", v, ok)
	}

	must(t, d.Control().SetMode(context.Background(), "api", "", limiters.Enforce))
	waitFor(t, 2*time.Second, "the enforce mode", func() bool { m, _ := d.Mode("api"); return m == limiters.Enforce })
	// The shadow's next_free (about 4s ahead) was cleared: no stall.
	res, err := d.Buckets().Peek(context.Background(), shaping.Bucket{Name: "api", Rate: limiters.PerSecond(5)}, 1)
	if err != nil || res.Wait > 0 {
		t.Errorf("bucket after the switch: wait %s, %v; want 0 (cleared)", res.Wait, err)
	}
	for i := range 10 {
		if _, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Payload: []byte(fmt.Sprint("e", i))}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "10 more releases", func() bool { return rec.count() >= 30 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if m := maxInWindow(rec.times[20:], time.Second); m > 6 {
		t.Errorf("enforced: %d releases in a second, want at most rate+1 = 6", m)
	}
	for k, c := range rec.seen {
		if c != 1 {
			t.Errorf("task %s delivered %d times, want once", k, c)
		}
	}
}

// A shaping mode switched with Control.SetMode reaches every dispatcher
// sharing the Redis within a second (their control ticks).
func TestShapingModeSwitchReachesEveryDispatcherWithinASecond(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var ds []*shaping.Dispatcher
	for range 3 {
		d := shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: quiet})
		must(t, d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(5), ShapingMode: limiters.Shadow, Handler: newRecorder().handle}))
		must(t, d.Start())
		t.Cleanup(func() { d.Shutdown(context.Background()) })
		ds = append(ds, d)
	}
	modes := func(want limiters.Mode) bool {
		for _, d := range ds {
			if m, _ := d.Mode("api"); m != want {
				return false
			}
		}
		return true
	}
	if !modes(limiters.Shadow) {
		t.Fatal("dispatchers do not start in the configured shadow mode")
	}
	ctl := shaping.NewControl(rdb, prefix)
	for _, want := range []limiters.Mode{limiters.Enforce, limiters.Shadow} {
		at := time.Now()
		must(t, ctl.SetMode(context.Background(), "api", "", want))
		waitFor(t, 3*time.Second, "every dispatcher in "+want.String(), func() bool { return modes(want) })
		if took := time.Since(at); took > time.Second {
			t.Errorf("switch to %s took %s to reach 3 dispatchers, want within 1s", want, took)
		} else {
			t.Logf("switch to %s reached 3 dispatchers in %s", want, took.Round(time.Millisecond))
		}
	}
	st, err := ctl.State(context.Background(), "api")
	if err != nil || st.Modes[""] != limiters.Shadow {
		t.Errorf("State = %+v, %v; want the shaping mode shadow", st, err)
	}
	must(t, ctl.ClearMode(context.Background(), "api", ""))
	st, _ = ctl.State(context.Background(), "api")
	if _, ok := st.Modes[""]; ok {
		t.Errorf("after ClearMode, State.Modes = %v, want no shaping mode", st.Modes)
	}
}
