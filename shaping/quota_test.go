package shaping_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/testutil"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// A stand-in API that takes 20 requests in any second and 100 in any 10 s
// (sliding, by arrival) and answers 429 past either; shaper runs it at
// 50/s with the same two quotas configured. Over 300 tasks, three windows
// of 10 s, the API never answers 429 and no 10 s window holds more than
// 100; the tasks that wait across each reset are delivered once, none
// archived or retried. The long quota binds as it did at 300 per 30 s
// (the 1 s quota alone would pass 200 in 10 s: 100 go in the first 5 s,
// then the lane holds until the reset) and the run takes at least two
// windows, about 25 s where 900 per 30 s took 77 s under -race.
func TestQuotasNeverExceededAcrossResets(t *testing.T) {
	t.Parallel()
	const n, perSec, perLong, long = 300, 20, 100, 10 * time.Second
	api := newStandIn(func(now time.Time, acc []time.Time, h http.Header) int {
		if inLast(acc, now, time.Second) >= perSec || inLast(acc, now, long) >= perLong {
			h.Set("Retry-After", "1")
			return http.StatusTooManyRequests
		}
		return http.StatusOK
	})
	defer api.Close()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	reg := prometheus.NewRegistry()
	d := shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: reg})
	must(t, d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(50),
		// the margin covers how late a call may reach the stand-in on a
		// shared CI machine under -race (one arrived more than the default
		// 20ms late): the test is about the resets, not the jitter
		Quotas: []shaping.Quota{{Limit: perSec, Per: time.Second, Margin: 100 * time.Millisecond},
			{Limit: perLong, Per: long, Margin: 100 * time.Millisecond}},
		Handler: shaping.HTTPHandler(shaping.HTTPConfig{URL: api.URL(), Timeout: 5 * time.Second})}))
	defer d.Shutdown(context.Background())
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix})
	defer p.Close()
	for i := range n {
		_, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Payload: fmt.Appendf(nil, "%d", i)})
		must(t, err)
	}
	start := time.Now()
	must(t, d.Start())
	waitFor(t, 60*time.Second, "300 tasks accepted by the API", func() bool { ok, _ := api.counts(); return ok >= n })
	took := time.Since(start)

	acc, refused, seen := api.snapshot()
	if len(refused) != 0 {
		t.Errorf("the API answered 429 %d times, want 0", len(refused))
	}
	maxLong, max1 := maxInWindow(acc, long), maxInWindow(acc, time.Second)
	if maxLong > perLong || max1 > perSec {
		t.Errorf("most arrivals in any %v: %d (quota %d); in any 1 s: %d (quota %d)", long, maxLong, perLong, max1, perSec)
	}
	for i := range n {
		if c := seen[fmt.Sprint(i)]; c != 1 {
			t.Errorf("task %d delivered %d times, want once", i, c)
		}
	}
	// three windows' worth: the second and third batches waited for a reset
	if took < 2*long {
		t.Errorf("%d tasks in %s: faster than %d per %v allows", n, took, perLong, long)
	}
	in := queue.NewInspector(rdb, prefix)
	waitFor(t, 10*time.Second, "the queue drained", func() bool {
		c, err := in.Counts(context.Background(), "api")
		return err == nil && c.Pending+c.Active == 0
	})
	c, err := in.Counts(context.Background(), "api")
	must(t, err)
	if c.Archived != 0 || c.Retry != 0 {
		t.Errorf("archived %d, retry %d: want 0 (a quota hold consumes no attempt)", c.Archived, c.Retry)
	}
	if r := counterSum(t, reg, "shaper_shaping_handler_outcomes_total", "outcome", "retry"); r != 0 {
		t.Errorf("%v retries: want 0", r)
	}
	holds := counterSum(t, reg, "shaper_shaping_holds_total")
	if holds == 0 {
		t.Error("no reservation was held by a quota")
	}
	t.Logf("%d tasks in %s: 429s %d, most in any %v %d, in any 1 s %d; %v quota holds", n, took.Round(time.Second),
		len(refused), long, maxLong, max1, holds)
}

// counterSum sums a counter or gauge family's series that carry the
// label pairs given.
func counterSum(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	must(t, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					found = found || (lp.GetName() == labels[i] && lp.GetValue() == labels[i+1])
				}
				if !found {
					continue series
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// A downstream's quotas are validated when it is added, by the rule the
// config file is checked by too (internal/quota), naming the Go field.
func TestQuotaValidation(t *testing.T) {
	t.Parallel()
	d := shaping.New(redistest.Client(t), shaping.Config{Prefix: redistest.Prefix(t)})
	for i, c := range []struct {
		ds   shaping.Downstream
		want string
	}{
		{shaping.Downstream{Quotas: []shaping.Quota{{Limit: 0, Per: time.Hour}}}, "Quotas[0].Limit: must be at least 1, got 0"},
		{shaping.Downstream{Quotas: []shaping.Quota{{Limit: 10, Per: time.Millisecond}}}, "Quotas[0].Per: must be whole milliseconds"},
		{shaping.Downstream{Quotas: []shaping.Quota{{Limit: 10, Per: time.Hour, Offset: time.Minute}}}, "Quotas[0].Offset: must be in [0, Per) and only set with Aligned"},
		{shaping.Downstream{Quotas: []shaping.Quota{{Limit: 10, Per: time.Hour}, {Limit: 20, Per: time.Hour}}}, "Quotas[1]: same period and alignment as quota [0]"},
		{shaping.Downstream{MaxCost: 50, Quotas: []shaping.Quota{{Limit: 10, Per: time.Hour}}}, "Quotas[0].Limit: 10 is below the largest release's cost, 50"},
	} {
		c.ds.Name, c.ds.Rate, c.ds.Handler = fmt.Sprint("d", i), limiters.PerSecond(10), func(context.Context, *shaping.Task) error { return nil }
		if err := d.Add(c.ds); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("step %d: Add = %v, want an error containing %q", i, err, c.want)
		}
	}
	// the default max cost stays within the smallest quota
	must(t, d.Add(shaping.Downstream{Name: "ok", Rate: limiters.PerSecond(100), Quotas: []shaping.Quota{{Limit: 7, Per: time.Hour}},
		Handler: func(context.Context, *shaping.Task) error { return nil }}))
	if ds := d.Downstreams(); ds[0].MaxCost != 7 {
		t.Errorf("default MaxCost %d with a quota of 7, want 7", ds[0].MaxCost)
	}
	// a batch's rows share the quota: the default max cost is per row
	must(t, d.Add(shaping.Downstream{Name: "batch", Rate: limiters.PerSecond(100), Quotas: []shaping.Quota{{Limit: 20, Per: time.Hour}},
		Batch: &shaping.Batch{MaxRows: 10}, Handler: func(context.Context, *shaping.Task) error { return nil }}))
	if ds := d.Downstreams(); ds[1].MaxCost != 2 {
		t.Errorf("default MaxCost %d of a batch of 10 rows with a quota of 20, want 2", ds[1].MaxCost)
	}
}

// An answer that refused the call (429/503) gives its units back to the
// quotas: three refusals under a quota of 10 an hour still leave room for
// all ten tasks (before, the three would have held the last three for an
// hour).
func TestThrottledCallsUseNoQuota(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	var mu sync.Mutex
	calls, ok := 0, map[string]bool{}
	d := shaping.New(rdb, shaping.Config{Prefix: prefix})
	if err := d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(20),
		Quotas: []shaping.Quota{{Limit: 10, Per: time.Hour}},
		Handler: func(ctx context.Context, tk *shaping.Task) error {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if calls <= 3 {
				return shaping.Throttled(50*time.Millisecond, errors.New("429"))
			}
			ok[tk.ID] = true
			return nil
		}}); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Shutdown(context.Background()) })
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix})
	defer p.Close()
	for range 10 {
		if _, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Payload: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 15*time.Second, "all 10 tasks delivered within the quota of 10", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ok) == 10
	})
}
