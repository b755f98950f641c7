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
// Redis before the API runs out, and resume when its window resets. The
// API answers in 100ms and each process holds one task, so that all three
// take part (one process's takes would otherwise serve every slot).
func TestAnnouncedLimitsPaceEveryProcess(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"x-ratelimit delta", "x-ratelimit epoch", "ietf"} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			if format != "ietf" {
				// the formats differ only in the Go header parsing
				redistest.TimingOnly(t, "this test's ietf subtest (the same answer script and keys)")
			}
			const n, limit, w = 240, 60, 2 * time.Second
			api := newStandIn(announcer(limit, w, format))
			api.delay = 100 * time.Millisecond
			defer api.Close()
			rdb := redistest.Client(t)
			prefix := redistest.Prefix(t)
			reg := prometheus.NewRegistry()
			for i := range 3 {
				d := shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: reg})
				must(t, d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(50), MaxWait: 500 * time.Millisecond, Workers: 1,
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
			// the last settle runs after the API counted its answer: poll
			dir := map[bool]string{true: "charged", false: "refunded"}[c.real > c.enqueued]
			want := float64(n * abs(c.real-c.enqueued))
			waitFor(t, 5*time.Second, fmt.Sprintf("%v units %s", want, dir), func() bool {
				return counterSum(t, reg, "shaper_shaping_settled_cost_units_total", "direction", dir) >= want
			})
			if got := counterSum(t, reg, "shaper_shaping_settled_cost_units_total", "direction", dir); got != want {
				t.Errorf("settled %v units %s, want %v", got, dir, want)
			}
			t.Logf("%s: %d releases over %s (real cost %s a task: %s)", c.name, n, span.Round(time.Millisecond), realIV, ideal)
		})
	}
}

func abs(v int64) int64 { return max(v, -v) }

// scriptCalls is how many calls of script this registry's dispatchers
// made (shaper_redis_script_duration_seconds).
func scriptCalls(t *testing.T, reg *prometheus.Registry, script string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	must(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "shaper_redis_script_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "script" && lp.GetValue() == script {
					return float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	return 0
}

// Quotas cost no Redis call of their own: the reservation checks them in
// the same script call, so the calls per release are those without
// quotas; a quota that is spent holds the lane asleep until the reply's
// time, not polling; an answer costs a call only when its limit binds.
// Not parallel: INFO commandstats counts the whole server.
func TestQuotaEconomy(t *testing.T) {
	// its counts depend on how the tasks reach the lane (one at a time or
	// together), which is timing: on the cluster, beside the cmd pass, a
	// run counted 0.51 reservations per release for 0.10
	redistest.TimingOnly(t, "TestQuotasNeverExceededAcrossResets, TestResetClearsASpentQuota (the same quota scripts and keys)")
	rdb := redistest.Client(t)
	type result struct{ total, scripts, reserve, answer, took float64 }
	run := func(name string, quotas []shaping.Quota, header http.Header) result {
		const n = 200
		prefix := redistest.Prefix(t)
		reg := prometheus.NewRegistry()
		d := shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: reg})
		rec := newRecorder()
		must(t, d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(100), Quotas: quotas,
			Handler: func(ctx context.Context, tk *shaping.Task) error {
				if header != nil {
					tk.ReportHeader(header)
				}
				return rec.handle(ctx, tk)
			}}))
		p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix})
		defer p.Close()
		for i := range n {
			_, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Payload: fmt.Appendf(nil, "%d", i)})
			must(t, err)
		}
		before, err := redistest.ReadCommandStats(context.Background(), rdb)
		must(t, err)
		start := time.Now()
		must(t, d.Start())
		waitFor(t, 30*time.Second, name+": 200 releases", func() bool { return rec.count() >= n })
		took := time.Since(start)
		after, err := redistest.ReadCommandStats(context.Background(), rdb)
		must(t, err)
		d.Shutdown(context.Background())
		s := after.Sub(before)
		r := result{total: float64(s.Total()-1) / n, scripts: float64(s["evalsha"]+s["eval"]) / n,
			reserve: scriptCalls(t, reg, "shaping") / n, answer: scriptCalls(t, reg, "answer") / n, took: took.Seconds()}
		t.Logf("%s: per release %.2f commands, %.2f script calls (reservations %.3f, answers %.3f); 200 releases in %.1fs",
			name, r.total, r.scripts, r.reserve, r.answer, r.took)
		return r
	}
	base := run("no quota", nil, nil)
	two := run("two quotas", []shaping.Quota{{Limit: 10000, Per: time.Hour}, {Limit: 100000, Per: 24 * time.Hour, Aligned: true}}, nil)
	held := run("a quota of 100 per 4s, spent halfway", []shaping.Quota{{Limit: 100, Per: 4 * time.Second}}, nil)
	loose := run("answers with limits that cannot bind", nil, http.Header{"X-Ratelimit-Remaining": {"100000"}, "X-Ratelimit-Reset": {"60"}})
	tight := run("answers with limits that bind", nil, http.Header{"X-Ratelimit-Remaining": {"5000"}, "X-Ratelimit-Reset": {"60"}})
	// A run's reservation calls vary with timing (how many slots each call
	// takes: 0.74-0.86 per release without quotas in one suite run), so
	// the quotas are held to the larger of two runs without.
	again := run("no quota, again", nil, nil)
	base.reserve = max(base.reserve, again.reserve)
	// (with quotas a wasted slot, rare, gives its units back: an answer
	// call). A lane with quotas reserves as its tasks arrive, not ahead
	// for a take's later tasks as a lane without does (lane.owe): up to
	// twice the calls, still one script for the rate and every quota.
	if two.reserve+two.answer > base.reserve*2+0.05 {
		t.Errorf("two quotas: %.3f reservation and %.3f answer calls per release, without %.3f: want at most twice",
			two.reserve, two.answer, base.reserve)
	}
	// the hold (about 3 s) costs a few calls over the same quotas' run
	// without one, not one per worker per poll (11 workers polling every
	// 500ms would be 66); the engine's small takes make the count vary
	// with timing
	if extra := (held.reserve - two.reserve) * 200; extra > 20 || held.took < 3 {
		t.Errorf("a 3 s quota hold cost %.0f more reservation calls (in %.1fs), want a few", extra, held.took)
	}
	if loose.answer != 0 {
		t.Errorf("answers whose limit cannot bind made %.3f calls per release, want 0", loose.answer)
	}
	if tight.answer < 0.99 || tight.answer > 1.01 {
		t.Errorf("answers whose limit binds made %.3f calls per release, want 1", tight.answer)
	}
}
