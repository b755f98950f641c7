package shaping_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// announcer is a stand-in API with fixed windows of w (from the Unix
// epoch) of limit requests, which only announces them: every answer says
// what is left and when the window resets, in one header format; past the
// limit it answers 429.
func announcer(limit int, w time.Duration, format string) func(time.Time, []time.Time, http.Header) int {
	return func(now time.Time, acc []time.Time, h http.Header) int {
		start := now.Truncate(w)
		end := start.Add(w)
		used := 0
		for i := len(acc) - 1; i >= 0 && !acc[i].Before(start); i-- {
			used++
		}
		status := http.StatusOK
		if used >= limit {
			status = http.StatusTooManyRequests
		} else {
			used++
		}
		left := strconv.Itoa(limit - used)
		delta := strconv.Itoa(int(math.Ceil(end.Sub(now).Seconds())))
		switch format {
		case "x-ratelimit delta":
			h.Set("X-RateLimit-Limit", strconv.Itoa(limit))
			h.Set("X-RateLimit-Remaining", left)
			h.Set("X-RateLimit-Reset", delta)
		case "x-ratelimit epoch":
			h.Set("X-RateLimit-Limit", strconv.Itoa(limit))
			h.Set("X-RateLimit-Remaining", left)
			h.Set("X-RateLimit-Reset", strconv.FormatInt(end.Unix(), 10))
		case "ietf":
			h.Set("RateLimit-Policy", fmt.Sprintf(`"win";q=%d;w=%d`, limit, int(w.Seconds())))
			h.Set("RateLimit", fmt.Sprintf(`"win";r=%s;t=%s`, left, delta))
		}
		if status != http.StatusOK {
			h.Set("Retry-After", delta)
		}
		return status
	}
}

// A stand-in API that only announces its limit (60 per 2 s window, no
// quota configured in shaper), in each header format: three dispatchers
// at 50/s never get a 429, because every answer paces all three through
// Redis before the API runs out, and resume when its window resets.
func TestAnnouncedLimitsPaceEveryProcess(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"x-ratelimit delta", "x-ratelimit epoch", "ietf"} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			const n, limit, w = 240, 60, 2 * time.Second
			api := newStandIn(announcer(limit, w, format))
			defer api.Close()
			rdb := redistest.Client(t)
			prefix := redistest.Prefix(t)
			reg := prometheus.NewRegistry()
			for i := range 3 {
				d := shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: reg})
				must(t, d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(50), MaxWait: 500 * time.Millisecond,
					Handler: shaping.HTTPHandler(shaping.HTTPConfig{URL: api.URL(), Timeout: 5 * time.Second,
						Headers: map[string]string{"X-Test-Process": fmt.Sprint(i)}})}))
				defer d.Shutdown(context.Background())
				must(t, d.Start())
			}
			p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix})
			defer p.Close()
			start := time.Now()
			for i := range n {
				_, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Payload: fmt.Appendf(nil, "%d", i)})
				must(t, err)
			}
			waitFor(t, 60*time.Second, "240 tasks accepted", func() bool { ok, _ := api.counts(); return ok >= n })
			took := time.Since(start)
			acc, refused, seen := api.snapshot()
			if len(refused) != 0 {
				t.Errorf("%d answers were 429 (first at +%s), want 0", len(refused), refused[0].Sub(acc[0]).Round(time.Millisecond))
			}
			for i := range n {
				if c := seen[fmt.Sprint(i)]; c != 1 {
					t.Errorf("task %d delivered %d times, want once", i, c)
				}
			}
			api.mu.Lock()
			procs := len(api.byProc)
			api.mu.Unlock()
			if procs != 3 {
				t.Errorf("requests came from %d processes, want 3", procs)
			}
			perWindow := map[int64]int{}
			for _, a := range acc {
				perWindow[a.Truncate(w).UnixNano()]++
			}
			most := 0
			for _, c := range perWindow {
				most = max(most, c)
			}
			// it keeps up: at least half of what the API allows
			if rate := float64(n) / took.Seconds(); rate < 0.5*float64(limit)/w.Seconds() {
				t.Errorf("%.1f/s, want at least half the API's %.0f/s", rate, float64(limit)/w.Seconds())
			}
			t.Logf("%s: %d tasks in %s (%.1f/s; the API takes %.0f/s), 429s %d, most in a window %d of %d, %v answers acted on",
				format, n, took.Round(10*time.Millisecond), float64(n)/took.Seconds(), float64(limit)/w.Seconds(), len(refused), most, limit,
				counterSum(t, reg, "shaper_shaping_announcements_total"))
		})
	}
}

// Tasks enqueued at cost 1 whose answers say they cost 3 (X-Request-Cost):
// from the first answer on, releases are spaced by the real cost, so the
// run takes what 3 units a task take at the rate, within one task; tasks
// of cost 3 whose answers say 1 are refunded and run three times faster.
func TestSettledCostSpacesReleases(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name           string
		enqueued, real int64
	}{{"charge", 1, 3}, {"refund", 3, 1}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			const n = 16
			api := newStandIn(func(_ time.Time, _ []time.Time, h http.Header) int {
				h.Set("X-Request-Cost", strconv.FormatInt(c.real, 10))
				return http.StatusOK
			})
			defer api.Close()
			rdb := redistest.Client(t)
			prefix := redistest.Prefix(t)
			reg := prometheus.NewRegistry()
			d := shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: reg})
			must(t, d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(20), Workers: 1, MaxCost: 3,
				Handler: shaping.HTTPHandler(shaping.HTTPConfig{URL: api.URL(), CostHeader: "X-Request-Cost"})}))
			defer d.Shutdown(context.Background())
			p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix})
			defer p.Close()
			for i := range n {
				_, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Cost: c.enqueued, Payload: fmt.Appendf(nil, "%d", i)})
				must(t, err)
			}
			must(t, d.Start())
			waitFor(t, 30*time.Second, "16 answers", func() bool { ok, _ := api.counts(); return ok >= n })
			acc, _, _ := api.snapshot()
			sort.Slice(acc, func(i, j int) bool { return acc[i].Before(acc[j]) })
			unit := 50 * time.Millisecond // 1 unit at 20/s
			realIV := time.Duration(c.real) * unit
			// every gap is at least the real cost's interval (less the late
			// tolerance) but one: a slot the lane reserved ahead before the
			// first answers corrected the bucket
			short := 0
			for i := 1; i < len(acc); i++ {
				if gap := acc[i].Sub(acc[i-1]); gap < realIV-unit/2 {
					short++
					t.Logf("gap %d: %s, shorter than the real cost's %s", i, gap.Round(time.Millisecond), realIV)
				}
			}
			if short > 1 {
				t.Errorf("%d gaps shorter than the real cost's interval %s, want at most 1", short, realIV)
			}
			span := acc[len(acc)-1].Sub(acc[0])
			ideal := time.Duration(n-1) * realIV
			enq := time.Duration(c.enqueued) * unit
			// within one task of the real cost
			if span < ideal-max(realIV, enq)-unit/2 || span > ideal+max(realIV, enq)+300*time.Millisecond {
				t.Errorf("%d releases over %s, want %s (real cost) within one task", n, span.Round(time.Millisecond), ideal)
			}
			dir := map[bool]string{true: "charged", false: "refunded"}[c.real > c.enqueued]
			if got, want := counterSum(t, reg, "shaper_shaping_settled_cost_units_total", "direction", dir), float64(n*abs(c.real-c.enqueued)); got != want {
				t.Errorf("settled %v units %s, want %v", got, dir, want)
			}
			t.Logf("%s: %d releases over %s (real cost %s a task: %s)", c.name, n, span.Round(time.Millisecond), realIV, ideal)
		})
	}
}

func abs(v int64) int64 { return max(v, -v) }
