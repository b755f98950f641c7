package shaping_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/rlheader"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// hostile is one answer a downstream should never be able to freeze, speed
// up or empty a stream with.
type hostile struct {
	name   string
	status int
	header map[string]string
	every  bool // every answer carries it (else only the first)
}

var hostileAnswers = []hostile{
	{"ietf dictionary, reset 999999999", 200, map[string]string{"RateLimit": "remaining=0, reset=999999999"}, false},
	{"Retry-After 99999999", 429, map[string]string{"Retry-After": "99999999"}, false},
	{"Retry-After a date in 9999", 429, map[string]string{"Retry-After": "Fri, 31 Dec 9999 23:59:59 GMT"}, false},
	{"X-RateLimit-Reset 1e300", 200, map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1e300"}, false},
	{"503 with RateLimit-Reset 86400", 503, map[string]string{"RateLimit-Remaining": "0", "RateLimit-Reset": "86400"}, false},
	{"cost 1e18", 200, map[string]string{"X-Request-Cost": "1000000000000000000"}, false},
	{"cost MaxInt64", 200, map[string]string{"X-Request-Cost": "9223372036854775807"}, false},
	{"cost 0 on every answer", 200, map[string]string{"X-Request-Cost": "0"}, true},
}

// hostileAPI answers h (the first time, or every time) and 200 otherwise.
func hostileAPI(h hostile) *standIn {
	var n atomic.Int64
	return newStandIn(func(_ time.Time, _ []time.Time, hd http.Header) int {
		if n.Add(1) > 1 && !h.every {
			return http.StatusOK
		}
		for k, v := range h.header {
			hd.Set(k, v)
		}
		return h.status
	})
}

// One hostile answer (a day-long reset, a huge Retry-After, a huge or a
// zero reported cost) holds a downstream at most its MaxHold: every task
// is delivered once within MaxHold and the time the rate needs, none is
// archived, and no second has more than rate + 1 releases.
func TestHostileAnswersHoldAtMostMaxHold(t *testing.T) {
	t.Parallel()
	redistest.TimingOnly(t, "TestResetClearsAnAnnouncedLimit (a day-long reset held for MaxHold), TestVendorRateHeadersHold and TestReportedCostWithDailyQuota (huge reported costs)")
	for _, h := range hostileAnswers {
		t.Run(h.name, func(t *testing.T) {
			t.Parallel()
			const n, rate, maxHold = 20, 10, 1500 * time.Millisecond
			api := hostileAPI(h)
			defer api.Close()
			run := startAnswerRun(t, shaping.Downstream{Rate: limiters.PerSecond(rate), MaxHold: maxHold}, api.URL(), "X-Request-Cost", n)
			reg := run.reg
			// the rate's 2 s, the hold, and a margin for a loaded machine
			waitFor(t, 2*time.Second+maxHold+4*time.Second, "every task accepted", func() bool {
				ok, _ := api.counts()
				return ok >= n
			})
			acc, _, seen := api.snapshot()
			for i := range n {
				if c := seen[fmt.Sprint(i)]; c != 1 {
					t.Errorf("task %d delivered %d times, want once", i, c)
				}
			}
			if c := maxInWindow(acc, time.Second); c > rate+1 {
				t.Errorf("%d releases in one second, want at most %d", c, rate+1)
			}
			if got := clampedOf(t, reg, h); got < 1 {
				t.Errorf("shaper_shaping_answer_clamped_total = %v, want the cut counted", got)
			}
		})
	}
}

// clampedOf is shaper_shaping_answer_clamped_total for the cut h should
// cause, as gathered from reg (0 when absent).
func clampedOf(t *testing.T, reg *prometheus.Registry, h hostile) float64 {
	t.Helper()
	what := "hold"
	switch h.header["X-Request-Cost"] {
	case "":
	case "0":
		what = "cost_low"
	default:
		what = "cost_high"
	}
	mfs, err := reg.Gather()
	must(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "shaper_shaping_answer_clamped_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			ls := map[string]string{}
			for _, l := range m.GetLabel() {
				ls[l.GetName()] = l.GetValue()
			}
			if ls["downstream"] == "api" && ls["what"] == what {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// A hold within MaxHold (a Retry-After of 30 min under the default hour)
// stays until an operator resets the downstream: Control.Reset clears the
// bucket, says what it cleared, and the sleeping lane wakes at once (the
// stream resumes well before the hold would end).
func TestResetClearsAHoldAndWakesTheLane(t *testing.T) {
	t.Parallel()
	const n = 10
	api := hostileAPI(hostile{status: 429, header: map[string]string{"Retry-After": "1800"}})
	defer api.Close()
	run := startAnswerRun(t, shaping.Downstream{Rate: limiters.PerSecond(20)}, api.URL(), "", n)
	rdb, prefix := run.rdb, run.prefix
	waitFor(t, 10*time.Second, "the 429", func() bool { _, r := api.counts(); return r >= 1 })
	// The 429 is counted when the API sends it; the hold exists once the
	// dispatcher has read the answer. A reset before that clears nothing.
	bucket := keys.New(prefix).Bucket("api")
	waitFor(t, 10*time.Second, "the hold in the bucket", func() bool {
		return rdb.PTTL(context.Background(), bucket).Val() > time.Minute
	})
	ctl := shaping.NewControl(rdb, prefix)
	c, err := ctl.Reset(context.Background(), "api", nil)
	must(t, err)
	if !c.Bucket {
		t.Errorf("Reset found no bucket to clear after a 30 min pushback: %+v", c)
	}
	waitFor(t, 20*time.Second, "every task accepted after the reset", func() bool { ok, _ := api.counts(); return ok >= n })
	_, _, seen := api.snapshot()
	for i := range n {
		if c := seen[fmt.Sprint(i)]; c != 1 {
			t.Errorf("task %d delivered %d times, want once", i, c)
		}
	}
}

// An operator opens a breaker by hand (Control.SetBreaker): releases stop
// in every process; closing it resumes them at once, well before the
// cool-down would have ended, and the reply says what it was.
func TestBreakerOpenAndCloseByHand(t *testing.T) {
	t.Parallel()
	api := newStandIn(func(time.Time, []time.Time, http.Header) int { return http.StatusOK })
	defer api.Close()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	brk := &shaping.Breaker{Cooldown: time.Hour, MaxCooldown: 2 * time.Hour}
	d := shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	must(t, d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(20), Breaker: brk,
		Handler: shaping.HTTPHandler(shaping.HTTPConfig{URL: api.URL(), Timeout: 5 * time.Second})}))
	defer d.Shutdown(context.Background())
	must(t, d.Start())
	ctl := shaping.NewControl(rdb, prefix)
	before, err := ctl.SetBreaker(context.Background(), "api", brk, true)
	must(t, err)
	if before != shaping.BreakerClosed {
		t.Errorf("breaker was %s before the first open, want closed", before)
	}
	waitFor(t, 3*time.Second, "this process sees it open", func() bool {
		b, err := d.Breaker("api")
		return err == nil && b.Mode == shaping.BreakerOpen
	})
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix})
	defer p.Close()
	const n = 10
	for i := range n {
		_, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Payload: fmt.Appendf(nil, "%d", i)})
		must(t, err)
	}
	// the open breaker holds them in the queue: none is taken while it is
	// open (the close below is what releases them); watched over two idle
	// checks of the queue
	in := queue.NewInspector(rdb, prefix)
	sample := time.NewTicker(50 * time.Millisecond)
	for end := time.Now().Add(time.Second); time.Now().Before(end); <-sample.C {
		b, err := in.Backlog("api")
		must(t, err)
		if b.Pending != n || b.Active != 0 {
			t.Fatalf("while the breaker is open by hand: %d pending, %d active; want %d, 0", b.Pending, b.Active, n)
		}
	}
	sample.Stop()
	if ok, _ := api.counts(); ok != 0 {
		t.Fatalf("%d released while the breaker was open by hand", ok)
	}
	if before, err = ctl.SetBreaker(context.Background(), "api", brk, false); err != nil || before != shaping.BreakerOpen {
		t.Fatalf("close: was %s, err %v; want open, nil", before, err)
	}
	waitFor(t, 5*time.Second, "every task accepted after the close", func() bool { ok, _ := api.counts(); return ok >= n })
	if _, err := ctl.SetBreaker(context.Background(), "api", nil, true); err == nil {
		t.Errorf("SetBreaker on a downstream without a breaker spec: no error")
	}
}

// A downstream whose limits come in a vendor's own fields (Shopify's
// X-Shopify-Shop-Api-Call-Limit: used/max) is read through its profile:
// a full bucket holds it like any announced limit.
func TestVendorRateHeadersHold(t *testing.T) {
	t.Parallel()
	api := newStandIn(func(_ time.Time, _ []time.Time, h http.Header) int {
		h.Set("X-Shopify-Shop-Api-Call-Limit", "40/40")
		return http.StatusOK
	})
	defer api.Close()
	shopify, ok := rlheader.Profile("shopify")
	if !ok {
		t.Fatal("no shopify profile")
	}
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	d := shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	must(t, d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(50), RateHeaders: []rlheader.Mapping{shopify},
		Handler: shaping.HTTPHandler(shaping.HTTPConfig{URL: api.URL(), Timeout: 5 * time.Second})}))
	defer d.Shutdown(context.Background())
	must(t, d.Start())
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix})
	defer p.Close()
	_, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Payload: []byte("1")})
	must(t, err)
	waitFor(t, 10*time.Second, "the answer read as a hold", func() bool {
		l, err := d.Limits("api")
		return err == nil && l.Announced.Effect == "hold" && strings.Contains(l.Announced.Header, "X-Shopify-Shop-Api-Call-Limit: 40/40")
	})
}

// answerRun is a dispatcher serving one downstream that calls a stand-in
// API, on a fresh prefix, with its tasks enqueued.
type answerRun struct {
	rdb    redis.UniversalClient
	prefix string
	d      *shaping.Dispatcher
	reg    *prometheus.Registry
}

// startAnswerRun adds ds (named "api"; its Handler calls url, reading
// costHeader as the call's cost when set) to a dispatcher on a fresh
// prefix, starts it (it stops at the test's end) and enqueues n tasks with
// the payloads "0" to "n-1".
func startAnswerRun(t *testing.T, ds shaping.Downstream, url, costHeader string, n int) answerRun {
	t.Helper()
	r := answerRun{rdb: redistest.Client(t), prefix: redistest.Prefix(t), reg: prometheus.NewRegistry()}
	r.d = shaping.New(r.rdb, shaping.Config{Prefix: r.prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: r.reg})
	ds.Name = "api"
	ds.Handler = shaping.HTTPHandler(shaping.HTTPConfig{URL: url, Timeout: 5 * time.Second, CostHeader: costHeader})
	must(t, r.d.Add(ds))
	t.Cleanup(func() { r.d.Shutdown(context.Background()) })
	must(t, r.d.Start())
	p := queue.NewProducer(r.rdb, queue.ProducerConfig{Prefix: r.prefix})
	defer p.Close()
	for i := range n {
		_, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Payload: fmt.Appendf(nil, "%d", i)})
		must(t, err)
	}
	return r
}
