package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/plan"
	"github.com/shaper-io/shaper/internal/testsink"
	"github.com/shaper-io/shaper/queue"
)

// keyCeilingRun is one run of the key ceiling's count test.
type keyCeilingRun struct {
	keys, tasks int     // tenants, tasks each
	keyRate     float64 // fairness.key_rate, per second
	rate        int     // the downstream's rate, per second
	// first: every task is enqueued before the processes start, so all
	// are due at once (else the tenants arrive while they run)
	first bool
}

// Three shaper processes, one fair downstream at 5000/s with a per-key
// ceiling of 2/s, 5,000 tenants × 8 tasks, each tenant's tasks enqueued
// together and the tenants one after another (as the enqueue CLI reads a
// file) while the processes run: counted at the release
// (X-Shaper-Released), no tenant has more than key_rate + 1 = 3 releases
// in any one-second window, the downstream no more than rate + 1, and
// every task is delivered once. It logs the per-tenant span (first to
// last release; the ceiling allows no less than (tasks−1)/key_rate) and
// the Redis commands per release. SHAPER_KEYCEILING_AUDIT=1 runs the
// audit's setup as well, 1,000 tenants × 10 tasks at key_rate 2/s, twice:
// enqueued while the processes run, and all enqueued before they start.
func TestKeyCeilingManyKeysThreeProcesses(t *testing.T) {
	runs := []keyCeilingRun{{keys: 5000, tasks: 8, keyRate: 2, rate: 5000}}
	if os.Getenv("SHAPER_KEYCEILING_AUDIT") != "" {
		runs = append(runs, keyCeilingRun{keys: 1000, tasks: 10, keyRate: 2, rate: 5000},
			keyCeilingRun{keys: 1000, tasks: 10, keyRate: 2, rate: 5000, first: true})
	}
	for _, kc := range runs {
		name := fmt.Sprintf("%dx%d_at_%gps", kc.keys, kc.tasks, kc.keyRate)
		if kc.first {
			name += "_enqueued_first"
		}
		t.Run(name, func(t *testing.T) { keyCeilingThreeProcesses(t, kc) })
	}
}

func keyCeilingThreeProcesses(t *testing.T, kc keyCeilingRun) {
	_, rdb := ownRedis(t)
	sink := testsink.New()
	defer sink.Close()
	cfg := fmt.Sprintf(`
redis: {url: %q, prefix: kc}
http: {listen: "127.0.0.1:0"}
shutdown_timeout: 5s
downstreams:
  - name: api
    rate: %d/s
    fairness: {key: tenant, key_rate: %g/s}
    handler: {type: http, url: %q, timeout: 5s}
`, "redis://"+rdb.Options().Addr+"/0", kc.rate, kc.keyRate, sink.URL())
	p := keyCeilingProducer(t, rdb, cfg)
	total := kc.keys * kc.tasks
	var procs []*proc
	var enqueued time.Duration
	startAll := func() {
		procs = []*proc{startShaper(t, cfg), startShaper(t, cfg), startShaper(t, cfg)}
		for _, pr := range procs {
			httpAddr(t, pr) // up and serving
		}
	}
	cmds := commandsDuring(t, rdb, func() {
		if !kc.first {
			startAll()
		}
		start := time.Now()
		var wg sync.WaitGroup
		const producers = 4
		for g := range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := g; k < kc.keys; k += producers {
					tn := fmt.Sprintf("t%05d", k)
					for i := range kc.tasks {
						b, _ := json.Marshal(tenantTask{tn, i})
						if _, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Key: tn, Payload: b}); err != nil {
							t.Errorf("enqueue %s #%d: %v", tn, i, err)
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		enqueued = time.Since(start)
		if kc.first {
			startAll()
		}
		waitFor(t, 120*time.Second, fmt.Sprintf("%d deliveries", total), func() bool { return sink.Count() >= total })
	})
	var skips, kcCalls float64
	for _, pr := range procs {
		m := scrape(t, "http://"+httpAddr(t, pr))
		v, _ := m.value("shaper_shaping_late_skips_total", "downstream=api")
		skips += v
		v, _ = m.value("shaper_redis_script_duration_seconds_count", "script=keyceiling")
		kcCalls += v
	}
	for _, pr := range procs {
		pr.stop(t)
	}
	hits := sink.OK()
	byKey := map[string][]time.Time{}
	seen := map[tenantTask]bool{}
	var wakes []time.Time
	for _, h := range hits {
		var tt tenantTask
		if err := json.Unmarshal([]byte(h.Payload), &tt); err != nil {
			t.Fatalf("payload %q: %v", h.Payload, err)
		}
		if seen[tt] {
			t.Errorf("%s #%d delivered twice", tt.T, tt.N)
		}
		seen[tt] = true
		byKey[tt.T] = append(byKey[tt.T], h.Wake)
		wakes = append(wakes, h.Wake)
	}
	if len(seen) != total {
		t.Errorf("%d tasks delivered, want %d", len(seen), total)
	}

	// per key: the most releases in any one-second window, and the span
	limit := int(kc.keyRate) + 1 // key_rate + 1, key_rate whole here
	var spans []time.Duration
	most := map[int]int{} // most in a second → tenants
	over, worst, worstKey := 0, 0, ""
	for k, ts := range byKey {
		sortTimes(ts)
		m := testsink.MaxInWindow(ts, time.Second)
		most[m]++
		if m > limit {
			over++
		}
		if m > worst {
			worst, worstKey = m, k
		}
		spans = append(spans, ts[len(ts)-1].Sub(ts[0]))
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i] < spans[j] })
	least := time.Duration(float64(kc.tasks-1) / kc.keyRate * float64(time.Second))
	n := float64(len(hits))
	sortTimes(wakes)
	t.Logf("%d tenants × %d tasks, key_rate %g/s, rate %d/s, 3 processes: enqueued in %v, released over %v",
		kc.keys, kc.tasks, kc.keyRate, kc.rate, enqueued.Round(time.Millisecond), wakes[len(wakes)-1].Sub(wakes[0]).Round(time.Millisecond))
	t.Logf("per tenant, most releases in one second → tenants: %v (limit %d); worst %d (%s: %v)", most, limit, worst, worstKey, offsets(byKey[worstKey]))
	t.Logf("per-tenant span (first to last release): min %v, median %v, max %v; the ceiling allows no less than %v",
		spans[0].Round(time.Millisecond), spans[len(spans)/2].Round(time.Millisecond), spans[len(spans)-1].Round(time.Millisecond), least)
	t.Logf("Redis: %.2f commands per release (evalsha %.2f, of them keyceiling.lua %.2f); top: %s", float64(cmds.Total())/n, float64(cmds["evalsha"])/n, kcCalls/n, top(cmds, 12))
	t.Logf("late skips: %.0f (%.1f%% of releases)", skips, 100*skips/n)
	if over > 0 {
		t.Errorf("%d of %d tenants had more than key_rate+1 = %d releases in one second (worst %d)", over, len(byKey), limit, worst)
	}
	if m := testsink.MaxInWindow(wakes, time.Second); m > kc.rate+1 {
		t.Errorf("%d releases in one second, want at most %d", m, kc.rate+1)
	} else {
		t.Logf("downstream: most releases in one second %d (rate %d/s)", m, kc.rate)
	}
}

// keyCeilingProducer is the producer the daemon builds from cfgText, on rdb.
func keyCeilingProducer(t *testing.T, rdb redis.UniversalClient, cfgText string) *queue.Producer {
	t.Helper()
	cfg, err := config.Parse([]byte(cfgText))
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := queue.NewProducer(rdb, pl.Producer)
	t.Cleanup(func() { p.Close() })
	return p
}

// offsets are ts after the first, rounded to ms.
func offsets(ts []time.Time) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, x := range ts {
		out[i] = x.Sub(ts[0]).Round(time.Millisecond)
	}
	return out
}
