package shaping_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/testutil"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// mostInWindow is the most of ts (sorted) inside any window of length w.
func mostInWindow(ts []time.Time, w time.Duration) int {
	best, j := 0, 0
	for i := range ts {
		for ts[i].Sub(ts[j]) >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// Three dispatchers on a fair downstream at 2000/s with a per-key ceiling
// of 4/s; 300 keys × 8 tasks, parked by a producer that knows no ceiling
// (so every task is due at once, as when a backlog was enqueued before
// any dispatcher ran, and fair share alone would give each key 2000/300
// ≈ 6.7/s): counted at the release (the handler's call), no key has more
// than key_rate + 1 = 5 releases in any one-second window, the
// downstream no more than rate + 1, and every task is delivered once.
func TestFairKeyCeilingThreeDispatchers(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	const keys, tasks, keyRate, rate = 300, 8, 4, 2000
	var mu sync.Mutex
	at := map[string][]time.Time{} // key → release times
	seen := map[string]int{}
	var all []time.Time
	ceiling := &shaping.Fairness{KeyRate: limiters.PerSecond(keyRate)}
	var ds []*shaping.Dispatcher
	reg := prometheus.NewRegistry()
	for range 3 {
		d := shaping.New(rdb, shaping.Config{Prefix: prefix, Registerer: reg})
		d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(rate), Fairness: ceiling, Workers: 300,
			Handler: func(ctx context.Context, tk *shaping.Task) error {
				now := time.Now()
				mu.Lock()
				at[tk.Key] = append(at[tk.Key], now)
				seen[string(tk.Payload)]++
				all = append(all, now)
				mu.Unlock()
				return nil
			}})
		ds = append(ds, d)
	}
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix, Fair: map[string]queue.FairShare{"api": {Fairness: &shaping.Fairness{}, Rate: limiters.PerSecond(rate)}}})
	t.Cleanup(func() { p.Close() })
	for i := range tasks {
		for k := range keys {
			key := fmt.Sprintf("k%03d", k)
			if _, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Key: key, Payload: []byte(fmt.Sprintf("%s-%d", key, i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, d := range ds {
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Shutdown(context.Background()) })
	}
	total := keys * tasks
	ok := testutil.Eventually(30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == total })
	for _, d := range ds {
		d.Shutdown(context.Background())
	}
	mu.Lock()
	defer mu.Unlock()
	if !ok {
		t.Errorf("%d of %d tasks delivered", len(seen), total)
	}
	for p, c := range seen {
		if c != 1 {
			t.Errorf("task %s delivered %d times, want once", p, c)
		}
	}
	worst, worstKey, over := 0, "", 0
	var spans []time.Duration
	for k, ts := range at {
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
		m := mostInWindow(ts, time.Second)
		if m > keyRate+1 {
			over++
		}
		if m > worst {
			worst, worstKey = m, k
		}
		spans = append(spans, ts[len(ts)-1].Sub(ts[0]))
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i] < spans[j] })
	sort.Slice(all, func(i, j int) bool { return all[i].Before(all[j]) })
	t.Logf("%d keys × %d tasks, key_rate %d/s, rate %d/s: released over %v; most of one key in a second %d (%s); span min %v, median %v (the ceiling allows no less than %v); %v late skips",
		keys, tasks, keyRate, rate, all[len(all)-1].Sub(all[0]).Round(time.Millisecond), worst, worstKey,
		spans[0].Round(time.Millisecond), spans[len(spans)/2].Round(time.Millisecond), time.Duration(tasks-1)*time.Second/keyRate,
		counterSum(t, reg, "shaper_shaping_late_skips_total"))
	if over > 0 {
		t.Errorf("%d of %d keys had more than key_rate+1 = %d releases in one second (worst %d: %s)", over, len(at), keyRate+1, worst, worstKey)
	}
	if m := mostInWindow(all, time.Second); m > rate+1 {
		t.Errorf("%d releases in one second, want at most %d", m, rate+1)
	}
}

// Tiers: a fair downstream at 200/s with key_rate 2/s and key_rates
// {vip: 10/s} and 300 other keys (a map the takes read from Redis, where
// each process puts it), two dispatchers, 30 tasks of vip and 30 of each
// of two basic keys, all due at once: counted at the release, vip has at
// most 10 + 1 in any second (and more than 2 + 1: its own ceiling, not
// the default, binds), each basic key at most 2 + 1; every task is
// delivered once.
func TestFairKeyRatesTiers(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	sp := keys.New(prefix)
	const rate, n = 200, 30
	var mu sync.Mutex
	at := map[string][]time.Time{}
	seen := map[string]int{}
	tiers := &shaping.Fairness{KeyRate: limiters.PerSecond(2), KeyRates: map[string]limiters.Limit{"vip": limiters.PerSecond(10)}}
	for i := range 300 {
		tiers.KeyRates[fmt.Sprint("other-", i)] = limiters.PerSecond(5)
	}
	for range 2 {
		d := shaping.New(rdb, shaping.Config{Prefix: prefix})
		must(t, d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(rate), Fairness: tiers,
			Handler: func(ctx context.Context, tk *shaping.Task) error {
				mu.Lock()
				at[tk.Key] = append(at[tk.Key], time.Now())
				seen[string(tk.Payload)]++
				mu.Unlock()
				return nil
			}}))
		must(t, d.Start())
		t.Cleanup(func() { d.Shutdown(context.Background()) })
	}
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix, Fair: map[string]queue.FairShare{"api": {Fairness: tiers, Rate: limiters.PerSecond(rate)}}})
	t.Cleanup(func() { p.Close() })
	keys := []string{"vip", "basic-a", "basic-b"}
	for i := range n {
		for _, k := range keys {
			_, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Key: k, Payload: []byte(fmt.Sprintf("%s-%d", k, i))})
			must(t, err)
		}
	}
	waitFor(t, 30*time.Second, "vip's 30 and 8 of each basic key", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(at["vip"]) == n && len(at["basic-a"]) >= 8 && len(at["basic-b"]) >= 8
	})
	if n := rdb.HLen(context.Background(), sp.Fair("api").Rates).Val(); n != 302 {
		t.Errorf("the key_rates HASH has %d fields; want 301 keys and the version", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, k := range keys {
		ts := append([]time.Time(nil), at[k]...)
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
		most, limit := mostInWindow(ts, time.Second), 3
		if k == "vip" {
			limit = 11
			if most <= 3 {
				t.Errorf("vip: at most %d in any second, want more than key_rate + 1 = 3 (its own 10/s)", most)
			}
		}
		t.Logf("%s: %d released, most in any second %d (bound %d)", k, len(ts), most, limit)
		if most > limit {
			t.Errorf("%s: %d releases in one second, want at most %d", k, most, limit)
		}
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("%s delivered %d times", id, c)
		}
	}
}
