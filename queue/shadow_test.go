package queue

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shaper-io/shaper/clock"
	"github.com/shaper-io/shaper/internal/clocktest"
	"github.com/shaper-io/shaper/internal/metrics"
	ptestutil "github.com/shaper-io/shaper/internal/testutil"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/shaping"
)

// shadowAdmission is a one-layer token bucket of 5/s (burst 5) in mode,
// deciding at clk's time (nil: the Redis clock).
func (b *bundle) shadowAdmission(tb testing.TB, name string, mode limiters.Mode, clk clock.Clock) Admission {
	tb.Helper()
	lim, err := limiters.New(b.rdb, limiters.Config{Name: name, Limit: limiters.PerSecond(5), Prefix: b.prefix, Clock: clk})
	if err != nil {
		tb.Fatal(err)
	}
	v := limiters.NewModeVar(mode)
	lay, err := limiters.NewLayered(limiters.Layer{Limiter: lim, Mode: v})
	if err != nil {
		tb.Fatal(err)
	}
	return Admission{Limiter: lay, Modes: []LimiterMode{{Name: name, Configured: mode, Var: v}}}
}

// A token bucket of 5/s in shadow under 20/s of traffic: every task is
// enqueued and delivered, and the shadow rejections it counts are, within
// one, the rejections the same bucket makes enforced on the same arrivals
// (both run here, at the same explicit times).
func TestShadowTokenBucketCountsWhatEnforcingRejects(t *testing.T) {
	t.Parallel()
	b := setup(t)
	t0 := time.Now().Truncate(time.Second).Add(time.Second)
	clk := clocktest.New(t0)
	reg := prometheus.NewRegistry()
	p := b.producer(t, ProducerConfig{Registerer: reg, Admission: map[string]Admission{
		"shadowed": b.shadowAdmission(t, "tb-shadow", limiters.Shadow, clk),
		"enforced": b.shadowAdmission(t, "tb-enforce", limiters.Enforce, clk)}})
	const n = 100 // 5s of arrivals at 20/s
	enforcedRejects := 0
	for i := range n {
		clk.AdvanceTo(t0.Add(time.Duration(i) * 50 * time.Millisecond))
		rec, err := p.Enqueue(context.Background(), Task{Downstream: "shadowed", Key: "tenant", Payload: []byte(fmt.Sprint(i))})
		if err != nil || rec.Outcome != Accepted {
			t.Fatalf("shadowed %d: %s, %v; want accepted", i, rec.Outcome, err)
		}
		rec, _ = p.Enqueue(context.Background(), Task{Downstream: "enforced", Key: "tenant"})
		if rec.Outcome == Rejected {
			enforcedRejects++
		}
	}
	m := metrics.New(reg)
	shadowRejects := testutil.ToFloat64(m.ShadowDecisions.WithLabelValues("shadowed", "tb-shadow", "rejected"))
	shadowAllowed := testutil.ToFloat64(m.ShadowDecisions.WithLabelValues("shadowed", "tb-shadow", "allowed"))
	t.Logf("20/s for 5s into 5/s: enforced rejected %d of %d; shadow counted %v would-reject, %v allowed", enforcedRejects, n, shadowRejects, shadowAllowed)
	if d := shadowRejects - float64(enforcedRejects); d < -1 || d > 1 {
		t.Errorf("shadow rejections %v, enforced rejections %d: want within 1", shadowRejects, enforcedRejects)
	}
	if enforcedRejects < 65 || enforcedRejects > 72 {
		t.Errorf("enforced rejections %d, want about 70 (5 + 5/s × 5s of 100 admitted)", enforcedRejects)
	}
	if shadowAllowed+shadowRejects != n {
		t.Errorf("shadow decisions %v + %v, want %d", shadowAllowed, shadowRejects, n)
	}
	if v := testutil.ToFloat64(m.Decisions.WithLabelValues("shadowed", "", "allowed")); v != 0 {
		t.Errorf("%v real decisions counted for a downstream whose only limiter is in shadow, want 0", v)
	}
	if got := testutil.ToFloat64(m.Enqueued.WithLabelValues("shadowed")); got != n {
		t.Errorf("enqueued %v shadowed tasks, want %d", got, n)
	}

	// Every one of them is delivered, once.
	var mu sync.Mutex
	seen := map[string]int{}
	d := shaping.New(b.rdb, shaping.Config{Prefix: b.prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(func() { d.Shutdown(context.Background()) })
	if err := d.Add(shaping.Downstream{Name: "shadowed", Rate: limiters.PerSecond(200), Handler: func(ctx context.Context, st *shaping.Task) error {
		mu.Lock()
		seen[string(st.Payload)]++
		mu.Unlock()
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	ptestutil.WaitFor(t, 10*time.Second, "100 deliveries", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == n })
	mu.Lock()
	defer mu.Unlock()
	for k, c := range seen {
		if c != 1 {
			t.Errorf("task %s delivered %d times", k, c)
		}
	}
}

// A limiter switched from shadow to enforce with Control.SetMode rejects
// in every producer within a second: three producers (three processes'
// worth: their own limiters, modes and follower) enqueue 50/s each over a
// 5/s bucket; the first rejection of each comes less than a second after
// the switch.
func TestModeSwitchReachesEveryProducerWithinASecond(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ps []*Producer
	var regs []*prometheus.Registry
	for range 3 {
		reg := prometheus.NewRegistry()
		ps = append(ps, b.producer(t, ProducerConfig{Registerer: reg,
			Admission: map[string]Admission{"api": b.shadowAdmission(t, "tb", limiters.Shadow, nil)}}))
		regs = append(regs, reg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var switched atomic.Int64 // unix ns of the switch; 0 before
	firstReject := make([]atomic.Int64, len(ps))
	var early atomic.Int64 // rejections before the switch
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for ctx.Err() == nil {
				select {
				case <-ctx.Done():
					return
				case <-tick.C: // the producer's pace
				}
				rec, _ := p.Enqueue(ctx, Task{Downstream: "api", Key: "k"})
				if rec.Outcome != Rejected {
					continue
				}
				if switched.Load() == 0 {
					early.Add(1)
				}
				firstReject[i].CompareAndSwap(0, time.Now().UnixNano())
			}
		}()
	}
	m0 := metrics.New(regs[0])
	ptestutil.WaitFor(t, 5*time.Second, "shadow rejections in producer 0", func() bool {
		return testutil.ToFloat64(m0.ShadowDecisions.WithLabelValues("api", "tb", "rejected")) >= 5
	})
	at := time.Now()
	switched.Store(at.UnixNano())
	if err := shaping.NewControl(b.rdb, b.prefix).SetMode(context.Background(), "api", "tb", limiters.Enforce); err != nil {
		t.Fatal(err)
	}
	ptestutil.WaitFor(t, 5*time.Second, "a rejection in every producer", func() bool {
		for i := range firstReject {
			if firstReject[i].Load() == 0 {
				return false
			}
		}
		return true
	})
	cancel()
	wg.Wait()
	if n := early.Load(); n > 0 {
		t.Errorf("%d rejections before the switch, want none (shadow)", n)
	}
	for i := range firstReject {
		took := time.Unix(0, firstReject[i].Load()).Sub(at)
		t.Logf("producer %d: first enforced rejection %s after the switch", i, took.Round(time.Millisecond))
		if took > time.Second {
			t.Errorf("producer %d rejected first %s after the switch, want within 1s", i, took)
		}
	}
	if v := testutil.ToFloat64(metrics.New(regs[2]).ShadowLimiter.WithLabelValues("api", "tb")); v != 0 {
		t.Errorf("shaper_admission_shadow_mode = %v in producer 2 after the switch, want 0", v)
	}
}
