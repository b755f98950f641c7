package shaping_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/testsink"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// The test: three dispatchers, an API that answers 500 for 10s
// and then recovers. The breaker opens in every process within one
// window of the first failure; while the API is down it sees at most the
// probe pace; after it recovers every task is delivered once, none is
// archived, and no attempt was consumed by the outage (asynq counted no
// failure, and no delivery saw a retried task).
func TestBreakerOutageThreeDispatchers(t *testing.T) {
	t.Parallel()
	const (
		tasks = 250
		down  = 10 * time.Second
	)
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	sink := testsink.New()
	t.Cleanup(sink.Close)
	sink.DownFor(down)
	brk := &shaping.Breaker{ErrorRatio: 0.5, Window: 2 * time.Second, MinCalls: 10, Cooldown: time.Second,
		MaxCooldown: 4 * time.Second, ProbeRate: limiters.PerSecond(2), Probes: 2}
	var mu sync.Mutex
	maxRetried := 0
	h := shaping.HTTPHandler(shaping.HTTPConfig{URL: sink.URL(), Timeout: 2 * time.Second})
	handler := func(ctx context.Context, tk *shaping.Task) error {
		mu.Lock()
		maxRetried = max(maxRetried, tk.Retried)
		mu.Unlock()
		return h(ctx, tk)
	}
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix})
	retries := 2
	for i := range tasks {
		if _, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Payload: []byte(fmt.Sprint(i)), MaxRetry: &retries}); err != nil {
			t.Fatal(err)
		}
	}
	var ds []*shaping.Dispatcher
	for range 3 {
		d := shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ShutdownTimeout: 5 * time.Second})
		must(t, d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(50), Handler: handler, Breaker: brk}))
		t.Cleanup(func() { d.Shutdown(context.Background()) })
		ds = append(ds, d)
	}
	for _, d := range ds {
		must(t, d.Start())
	}
	// Each process's first sight of the breaker open.
	opened := make([]time.Time, len(ds))
	waitFor(t, 10*time.Second, "the breaker open in every dispatcher", func() bool {
		all := true
		for i, d := range ds {
			if st, _ := d.Breaker("api"); opened[i].IsZero() && st.Mode != shaping.BreakerClosed {
				opened[i] = time.Now()
			}
			all = all && !opened[i].IsZero()
		}
		return all
	})
	first, upAt := sink.Down()
	last := opened[0]
	for i, at := range opened {
		t.Logf("dispatcher %d saw the breaker open %s after the first 500", i, at.Sub(first).Round(time.Millisecond))
		if at.Sub(first) > brk.Window {
			t.Errorf("dispatcher %d saw the breaker open %s after the first 500, want within the window %s", i, at.Sub(first), brk.Window)
		}
		if at.After(last) {
			last = at
		}
	}
	waitFor(t, 60*time.Second, fmt.Sprintf("%d tasks delivered", tasks), func() bool { return len(sink.Delivered()) >= tasks })
	// While down, once every process knew: only probes, at most 2/s.
	calls := testsink.Times(sink.Hits())
	probes := testsink.Between(calls, last, upAt)
	allowed := int(brk.ProbeRate.PerSec()*upAt.Sub(last).Seconds()) + 1
	t.Logf("the API saw %d calls before every process knew, %d in the %s after (probe pace allows %d)",
		testsink.Between(calls, first, last), probes, upAt.Sub(last).Round(time.Millisecond), allowed)
	if probes > allowed {
		t.Errorf("%d calls while down after the breaker opened everywhere, want at most %d (probe pace %s)", probes, allowed, brk.ProbeRate.RateString())
	}
	if n := testsink.Between(calls, first, last); n > 3*brk.MinCalls {
		t.Errorf("%d calls before the breaker was open everywhere, want at most %d", n, 3*brk.MinCalls)
	}
	if ok := sink.Delivered(); len(ok) != tasks || len(sink.OK()) != tasks {
		t.Errorf("%d tasks delivered (%d 2xx answers), want each of %d once", len(ok), len(sink.OK()), tasks)
	}
	in := queue.NewInspector(rdb, prefix)
	var b queue.Backlog
	waitFor(t, 5*time.Second, "an empty queue", func() bool {
		b, _ = in.Backlog("api")
		return b.Pending+b.Active+b.Retry+b.Scheduled == 0
	})
	if b.Archived != 0 || b.Retry != 0 || b.Failed != 0 {
		t.Errorf("backlog %+v: want nothing archived, nothing to retry and no failed attempt", b)
	}
	mu.Lock()
	defer mu.Unlock()
	if maxRetried != 0 {
		t.Errorf("a delivery saw Retried = %d, want 0 (the outage consumed no attempt)", maxRetried)
	}
}

// Add refuses breaker thresholds that contradict each other or the rate,
// naming the Go field and the value.
func TestBreakerAddRejectsContradictions(t *testing.T) {
	t.Parallel()
	d := shaping.New(nil, shaping.Config{})
	for i, tt := range []struct {
		rate limiters.Limit
		b    shaping.Breaker
		want string
	}{
		{limiters.PerSecond(5), shaping.Breaker{ProbeRate: limiters.PerSecond(10)}, "Breaker.ProbeRate: 10/s is above the rate 5/s"},
		{limiters.PerMinute(6), shaping.Breaker{Window: 5 * time.Second, MinCalls: 1}, "Breaker.Window: 5s is shorter than one interval of the rate 6/m (10s)"},
		{limiters.PerSecond(5), shaping.Breaker{ErrorRatio: 1.2}, "Breaker.ErrorRatio: must be in (0, 1], got 1.2"},
		{limiters.PerSecond(1), shaping.Breaker{}, "Breaker.MinCalls: 20 can never be reached"},
		{limiters.PerSecond(50), shaping.Breaker{Cooldown: time.Minute, MaxCooldown: time.Second}, "Breaker.MaxCooldown: 1s is below the cooldown 1m"},
	} {
		err := d.Add(shaping.Downstream{Name: fmt.Sprintf("ds%d", i), Rate: tt.rate, Handler: shaping.LogHandler(t.Logf), Breaker: &tt.b})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("step %d: Add = %v, want an error with %q", i, err, tt.want)
		}
	}
	if err := d.Add(shaping.Downstream{Name: "ok", Rate: limiters.PerSecond(50), Handler: shaping.LogHandler(t.Logf), Breaker: &shaping.Breaker{}}); err != nil {
		t.Errorf("the default breaker at 50/s: %v", err)
	}
}

// 4xx answers and throttles are answers of a live downstream: however
// many there are, the breaker stays closed.
func TestBreakerIgnores4xxAndThrottles(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	e.d = shaping.New(e.rdb, shaping.Config{Prefix: e.prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: reg})
	t.Cleanup(func() { e.d.Shutdown(context.Background()) })
	var mu sync.Mutex
	throttled, done := map[string]bool{}, 0
	h := func(ctx context.Context, tk *shaping.Task) error {
		mu.Lock()
		defer mu.Unlock()
		p := string(tk.Payload)
		switch {
		case p[len(p)-1]%2 == 0:
			done++
			return shaping.Permanent(&shaping.StatusError{Code: 404})
		case !throttled[p]:
			throttled[p] = true
			return shaping.Throttled(5*time.Millisecond, &shaping.StatusError{Code: 429})
		}
		done++
		return nil
	}
	brk := &shaping.Breaker{Window: 2 * time.Second, MinCalls: 10}
	must(t, e.d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(50), Handler: h, Breaker: brk}))
	e.enqueue("api", 60, nil)
	must(t, e.d.Start())
	opened := false
	waitFor(t, 20*time.Second, "60 tasks answered", func() bool {
		if st, _ := e.d.Breaker("api"); st.Mode != shaping.BreakerClosed {
			opened = true
		}
		mu.Lock()
		defer mu.Unlock()
		return done >= 60
	})
	if opened {
		t.Error("the breaker left closed on 4xx and throttles")
	}
	if n := gatherSum(t, reg, "shaper_shaping_breaker_transitions_total"); n != 0 {
		t.Errorf("%v breaker transitions, want 0", n)
	}
}

// A task that fails alone (its own 500, the downstream up) is no outage:
// the breaker stays closed, and after the verdict wait the task takes the
// ordinary retry path (here: MaxRetry 0, so it is archived with its error).
func TestBreakerPoisonTaskIsNoOutage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var mu sync.Mutex
	ok, poisonCalls := 0, 0
	h := func(ctx context.Context, tk *shaping.Task) error {
		mu.Lock()
		defer mu.Unlock()
		if string(tk.Payload) == "poison" {
			poisonCalls++
			return &shaping.StatusError{Code: 500, Err: errors.New("http: 500: this task breaks the server")}
		}
		ok++
		return nil
	}
	must(t, e.d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(50), Handler: h,
		Breaker: &shaping.Breaker{Window: 2 * time.Second, MinCalls: 10}}))
	zero := 0
	e.enqueue("api", 1, func(_ int, tk *queue.Task) { tk.Payload, tk.MaxRetry = []byte("poison"), &zero })
	e.enqueue("api", 40, nil)
	start := time.Now()
	must(t, e.d.Start())
	waitFor(t, 20*time.Second, "the poison task archived", func() bool {
		b, _ := e.in.Backlog("api")
		return b.Archived == 1
	})
	t.Logf("archived %s after start (the verdict wait holds it first)", time.Since(start).Round(time.Millisecond))
	waitFor(t, 10*time.Second, "40 deliveries", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ok >= 40
	})
	if st, _ := e.d.Breaker("api"); st.Mode != shaping.BreakerClosed {
		t.Errorf("breaker %v, want closed", st.Mode)
	}
	mu.Lock()
	defer mu.Unlock()
	if poisonCalls != 1 {
		t.Errorf("the poison task was called %d times, want 1 (MaxRetry 0)", poisonCalls)
	}
}

// Add refuses what the config file refuses, by the same rules (below
// both: fairindex.Check, quota.Check, sizing.CheckCalls, CheckAdaptive,
// CheckBatch, keys.CheckName), naming the Go field: a key's ceiling above
// the downstream's rate would never bind, an adaptive decrease of 1.5
// would raise the rate on every refusal.
func TestAddRejectsByTheFilesRules(t *testing.T) {
	t.Parallel()
	d := shaping.New(nil, shaping.Config{})
	five := limiters.PerSecond(5)
	for i, tt := range []struct {
		ds   shaping.Downstream
		want string
	}{
		{shaping.Downstream{Fairness: &shaping.Fairness{KeyRate: limiters.PerSecond(10)}}, `Fairness.KeyRate: "10/s" is above the downstream's rate "5/s"`},
		{shaping.Downstream{Fairness: &shaping.Fairness{KeyRates: map[string]limiters.Limit{"vip": limiters.PerSecond(6)}}}, `Fairness.KeyRates["vip"]: "6/s" is above`},
		{shaping.Downstream{Fairness: &shaping.Fairness{Weights: map[string]float64{"a": -1}}}, `Fairness.Weights["a"]: must be in (0, 1e+06], got -1`},
		{shaping.Downstream{Concurrency: 2, KeyConcurrency: 3}, "KeyConcurrency: 3 is above concurrency 2"},
		{shaping.Downstream{LeaseTime: time.Minute}, "LeaseTime: 1m0s set without concurrency"},
		{shaping.Downstream{Adaptive: &shaping.Adaptive{Floor: limiters.PerSecond(1), Ceiling: five, Decrease: 1.5}}, "Adaptive.Decrease: must be between 0 and 1 (exclusive), got 1.5"},
		{shaping.Downstream{Adaptive: &shaping.Adaptive{Floor: limiters.PerSecond(6), Ceiling: five}}, `Adaptive.Floor: "6/s" is above the ceiling "5/s"`},
		{shaping.Downstream{Batch: &shaping.Batch{MaxRows: 100001}}, "Batch.MaxRows: must be 1-100000, got 100001"},
		{shaping.Downstream{Name: ".."}, "a name of only dots is a path element"},
		{shaping.Downstream{MaxWait: 2 * time.Hour}, "MaxWait: must be positive and at most 1h0m0s, got 2h0m0s"},
	} {
		ds := tt.ds
		ds.Rate, ds.Handler = five, shaping.LogHandler(t.Logf)
		if ds.Name == "" {
			ds.Name = fmt.Sprintf("ds%d", i)
		}
		err := d.Add(ds)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("step %d: Add = %v, want an error with %q", i, err, tt.want)
		}
	}
	f := shaping.Fairness{KeyRate: five}
	if err := d.Add(shaping.Downstream{Name: "ok", Rate: five, Handler: shaping.LogHandler(t.Logf), Fairness: &f}); err != nil {
		t.Errorf("a key rate at the downstream's rate: %v", err)
	}
}
