package shaping_test

import (
	"context"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// exactIntervalUS is ceil(cost × period / rate) in µs, in big integers.
func exactIntervalUS(l limiters.Limit, cost int64) *big.Int {
	num := new(big.Int).Mul(big.NewInt(cost), big.NewInt(int64(l.Period/time.Microsecond)))
	den := big.NewInt(l.Rate)
	num.Add(num, new(big.Int).Sub(den, big.NewInt(1)))
	return num.Div(num, den)
}

// costs spans the whole int64 range: edges, powers of two and random draws.
func costs(r *rand.Rand) []int64 {
	out := []int64{1, 2, 5, 6, 1000, 1000000, 40000000000, math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 / 2, math.MaxInt64/1000 + 1}
	for s := 0; s < 63; s++ {
		out = append(out, int64(1)<<s, int64(1)<<s+1)
	}
	for range 200 {
		out = append(out, r.Int64N(math.MaxInt64)+1, r.Int64N(1<<r.IntN(63)+1)+1)
	}
	return out
}

// Interval is never shorter than the exact cost × period / rate, for costs
// up to MaxInt64: the product must not overflow int64 and wrap to a short
// or zero interval, which would release a huge cost without moving the
// bucket.
func TestIntervalNeverShorterThanExact(t *testing.T) {
	t.Parallel()
	limits := []limiters.Limit{limiters.PerSecond(5), limiters.PerSecond(1000000), limiters.PerHour(7), {Rate: 3, Period: 1500 * time.Millisecond}}
	r := rand.New(rand.NewPCG(1, 2))
	maxUS := big.NewInt(math.MaxInt64 / 1000)
	for _, l := range limits {
		for _, c := range costs(r) {
			got, ok := l.IntervalMicros(c)
			want := exactIntervalUS(l, c)
			switch {
			case want.Cmp(maxUS) > 0:
				if ok {
					t.Errorf("%s cost %d: IntervalMicros = %d, ok; want !ok (exact %s µs does not fit)", l, c, got, want)
				}
				if d := l.Interval(c); d != time.Duration(math.MaxInt64) {
					t.Errorf("%s cost %d: Interval = %s, want it saturated", l, c, d)
				}
			case !ok || big.NewInt(got).Cmp(want) != 0:
				t.Errorf("%s cost %d: IntervalMicros = %d, %v; want %s", l, c, got, ok, want)
			}
		}
	}
}

// Property: over costs across the whole int64 range, a reservation either
// is refused with ErrCostExceedsCapacity and writes nothing, or moves
// next_free by exactly the cost's interval (never more than MaxInterval),
// and no slot starts before the previous reservation's next_free.
func TestBucketCostPropertyWholeRange(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	bs := shaping.NewBuckets(rdb, redistest.Prefix(t))
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	for _, b := range []shaping.Bucket{
		{Name: "capped", Rate: limiters.PerSecond(5), MaxCost: 5},
		{Name: "open", Rate: limiters.PerSecond(5)},
		{Name: "fast", Rate: limiters.PerSecond(100000), Burst: 10},
	} {
		now := time.UnixMicro(1_700_000_000_000_000)
		prevNF := time.Time{}
		for i, c := range costs(r) {
			before, _ := rdb.Get(ctx, bs.Key(b.Name)).Int64()
			res, err := bs.ReserveAt(ctx, now, b, c, -1)
			after, _ := rdb.Get(ctx, bs.Key(b.Name)).Int64()
			exact := exactIntervalUS(b.Rate, c)
			refuse := exact.Cmp(big.NewInt(int64(shaping.MaxInterval/time.Microsecond))) > 0 || (b.MaxCost > 0 && c > b.MaxCost)
			if refuse {
				if !errors.Is(err, limiters.ErrCostExceedsCapacity) {
					t.Fatalf("%s step %d: cost %d: err %v, want ErrCostExceedsCapacity", b.Name, i, c, err)
				}
				if after != before {
					t.Fatalf("%s step %d: refused cost %d moved next_free %d -> %d", b.Name, i, c, before, after)
				}
				continue
			}
			if err != nil || !res.OK {
				t.Fatalf("%s step %d: cost %d: %+v, %v", b.Name, i, c, res, err)
			}
			if res.Slot().Before(prevNF.Add(-time.Duration(max(b.Burst-1, 0)) * b.Rate.Interval(1))) {
				t.Fatalf("%s step %d: slot %v before the previous next_free %v", b.Name, i, res.Slot(), prevNF)
			}
			if moved := res.NextFree.Sub(res.Slot()); moved > shaping.MaxInterval || big.NewInt(int64(moved/time.Microsecond)).Cmp(exact) > 0 {
				t.Fatalf("%s step %d: cost %d moved the bucket %s past its slot, want at most %s µs", b.Name, i, c, moved, exact)
			}
			prevNF = res.NextFree
			now = res.NextFree // the next call comes when this bucket is free again
		}
	}
}

// The script itself refuses intervals past 24h, whatever the caller sends.
func TestShapingScriptBoundsArguments(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	bs := shaping.NewBuckets(rdb, redistest.Prefix(t))
	if _, err := bs.PushBack(context.Background(), shaping.Bucket{Name: "p", Rate: limiters.PerSecond(5)}, 1000*time.Hour); err != nil {
		t.Fatalf("pushback: %v", err)
	}
	pttl := rdb.PTTL(context.Background(), bs.Key("p")).Val()
	if pttl > shaping.MaxInterval+time.Minute || pttl < shaping.MaxInterval-time.Minute {
		t.Errorf("a 1000h pushback left a TTL of %s, want it clamped to %s", pttl, shaping.MaxInterval)
	}
	if _, err := bs.Reserve(context.Background(), shaping.Bucket{Name: "b", Rate: limiters.PerSecond(5), Burst: math.MaxInt64 / 2}, 1, 0); err == nil {
		t.Error("a burst of MaxInt64/2 was accepted")
	}
}

// `shaper ctl reset` clears a parked bucket: the next reservation has no wait.
func TestBucketReset(t *testing.T) {
	t.Parallel()
	bs := shaping.NewBuckets(redistest.Client(t), redistest.Prefix(t))
	ctx := context.Background()
	b := shaping.Bucket{Name: "r", Rate: limiters.PerSecond(5)}
	if _, err := bs.PushBack(ctx, b, time.Hour); err != nil {
		t.Fatal(err)
	}
	if res, _ := bs.Peek(ctx, b, 1); res.Wait < 59*time.Minute {
		t.Fatalf("after a 1h pushback the wait is %s", res.Wait)
	}
	if err := bs.Reset(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	if res, _ := bs.Peek(ctx, b, 1); res.Wait != 0 {
		t.Errorf("after Reset the wait is %s, want 0", res.Wait)
	}
}

// A producer sets cost MaxInt64 or 4e10 on a 5/s downstream. A producer
// that knows the downstream's max cost refuses it; one that does not
// (plain asynq, another config) gets it archived at release with the
// reason, without moving the bucket, while the other tasks keep the rate.
func TestHugeCostRefusedAndArchived(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rec := newRecorder()
	must(t, e.d.Add(shaping.Downstream{Name: "ds", Rate: limiters.PerSecond(5), Workers: 4, Handler: rec.handle}))
	ctx := context.Background()
	strict := queue.NewProducer(e.rdb, queue.ProducerConfig{Prefix: e.prefix, MaxCost: map[string]int64{"ds": shaping.DefaultMaxCost(limiters.PerSecond(5), time.Second, 0)}})
	defer strict.Close()
	for _, c := range []int64{6, 40000000000, math.MaxInt64} {
		if _, err := strict.Enqueue(ctx, queue.Task{Downstream: "ds", Cost: c}); !errors.Is(err, limiters.ErrCostExceedsCapacity) {
			t.Errorf("cost %d: enqueue err %v, want ErrCostExceedsCapacity", c, err)
		}
	}
	if _, err := strict.Enqueue(ctx, queue.Task{Downstream: "ds", Cost: 5}); err != nil {
		t.Errorf("cost 5 (what the bucket holds): %v", err)
	}
	for _, c := range []int64{40000000000, math.MaxInt64, 1000000} {
		_, err := e.p.Enqueue(ctx, queue.Task{Downstream: "ds", Cost: c, Payload: []byte("huge")})
		must(t, err)
	}
	for range 3 {
		_, err := e.p.Enqueue(ctx, queue.Task{Downstream: "ds", Payload: []byte("ok")})
		must(t, err)
	}
	must(t, e.d.Start())
	waitFor(t, 15*time.Second, "3 archived, 4 delivered", func() bool {
		b, err := e.in.Backlog("ds")
		return err == nil && b.Archived == 3 && rec.count() == 4
	})
	archived, err := e.in.Archived("ds", 10)
	must(t, err)
	for _, a := range archived {
		if string(a.Payload) != "huge" || !strings.Contains(a.LastErr, "max cost") {
			t.Errorf("archived %q with %q, want the huge ones, with the max cost named", a.Payload, a.LastErr)
		}
	}
	res, err := e.d.Buckets().Peek(ctx, shaping.Bucket{Name: "ds", Rate: limiters.PerSecond(5)}, 1)
	must(t, err)
	if res.Wait > 2*time.Second {
		t.Errorf("the bucket waits %s after the huge costs, want under 2s (they must not move it)", res.Wait)
	}
}
