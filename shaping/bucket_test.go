package shaping_test

import (
	"context"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/shaping"
)

var t0 = time.Now().Truncate(time.Second).Add(time.Second)

const ms = time.Millisecond

func TestBucketSteps(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	bs := shaping.NewBuckets(rdb, redistest.Prefix(t))
	ctx := context.Background()
	b := shaping.Bucket{Name: "api", Rate: limiters.PerSecond(10)} // 100ms per unit
	steps := []struct {
		at      time.Duration
		cost    int64
		maxWait time.Duration
		ok      bool
		wait    time.Duration
	}{
		{0, 1, time.Second, true, 0},
		{0, 1, time.Second, true, 100 * ms},
		{0, 1, time.Second, true, 200 * ms},
		{50 * ms, 3, time.Second, true, 250 * ms}, // slot 300ms, occupies 300ms
		{50 * ms, 1, 500 * ms, false, 550 * ms},   // slot 600ms: wait 550ms > 500ms, nothing reserved
		{50 * ms, 1, 600 * ms, true, 550 * ms},    // same slot still free
		{2 * time.Second, 1, 0, true, 0},          // idle: no burst allowance (burst 1), next is 100ms later
		{2 * time.Second, 1, 0, false, 100 * ms},  // maxWait 0: only an immediate slot
		{2100 * ms, 1, 0, true, 0},
	}
	for i, s := range steps {
		r, err := bs.ReserveAt(ctx, t0.Add(s.at), b, s.cost, s.maxWait)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if r.OK != s.ok || r.Wait != s.wait {
			t.Errorf("step %d (at %v cost %d maxWait %v): ok=%v wait=%v, want ok=%v wait=%v", i, s.at, s.cost, s.maxWait, r.OK, r.Wait, s.ok, s.wait)
		}
		if pttl := rdb.PTTL(ctx, bs.Key("api")).Val(); pttl <= 0 {
			t.Errorf("step %d: next_free has no TTL (%v)", i, pttl)
		}
	}
}

func TestBucketBurst(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	bs := shaping.NewBuckets(rdb, redistest.Prefix(t))
	ctx := context.Background()
	b := shaping.Bucket{Name: "api", Rate: limiters.PerSecond(10), Burst: 3}
	var waits []time.Duration
	for i := 0; i < 5; i++ {
		r, err := bs.ReserveAt(ctx, t0, b, 1, -1)
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, r.Wait)
	}
	want := []time.Duration{0, 0, 0, 100 * ms, 200 * ms} // 3 at once after idle, then spaced
	for i := range want {
		if waits[i] != want[i] {
			t.Errorf("reservation %d: wait %v, want %v", i, waits[i], want[i])
		}
	}
}

func TestBucketPushBackAndPeek(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	bs := shaping.NewBuckets(rdb, redistest.Prefix(t))
	ctx := context.Background()
	b := shaping.Bucket{Name: "api", Rate: limiters.PerSecond(100)}
	if _, err := bs.PushBack(ctx, b, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	p, err := bs.Peek(ctx, b, 1)
	if err != nil {
		t.Fatal(err)
	}
	if p.Wait < 2900*ms || p.Wait > 3*time.Second {
		t.Fatalf("after a 3s pushback, peek wait = %v, want about 3s", p.Wait)
	}
	p2, _ := bs.Peek(ctx, b, 1)
	if p2.NextFree != p.NextFree {
		t.Errorf("peek reserved something: next_free moved from %v to %v", p.NextFree, p2.NextFree)
	}
	r, err := bs.Reserve(ctx, b, 1, time.Second)
	if err != nil || r.OK {
		t.Fatalf("reserve with max wait 1s during a 3s pushback: ok=%v err=%v, want refused", r.OK, err)
	}
	if pttl := rdb.PTTL(ctx, bs.Key("api")).Val(); pttl < 3*time.Second {
		t.Errorf("pushed-back key PTTL %v, want at least the pushback", pttl)
	}
}

func TestBucketRejectsBadInput(t *testing.T) {
	t.Parallel()
	bs := shaping.NewBuckets(redistest.Client(t), redistest.Prefix(t))
	ctx := context.Background()
	if _, err := bs.Reserve(ctx, shaping.Bucket{Name: "x", Rate: limiters.PerSecond(1)}, 0, 0); err == nil {
		t.Error("cost 0: want an error")
	}
	if _, err := bs.Reserve(ctx, shaping.Bucket{Name: "x", Rate: limiters.Limit{Rate: 0, Period: time.Second}}, 1, 0); err == nil {
		t.Error("rate 0: want an error")
	}
}

// Shaping reads only a Limit's Rate and Period: Rate.Burst, whatever its
// value (limiters' "0 means Rate", a large one, even a negative one), gives
// no burst; the only burst is Bucket.Burst / Downstream.Burst.
func TestBucketIgnoresLimitBurst(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	bs := shaping.NewBuckets(rdb, redistest.Prefix(t))
	ctx := context.Background()
	for _, burst := range []int64{0, 10, 50, -1} {
		b := shaping.Bucket{Name: "api", Rate: limiters.Limit{Rate: 10, Period: time.Second, Burst: burst}}
		if err := bs.Reset(ctx, b.Name); err != nil {
			t.Fatal(err)
		}
		for i, want := range []time.Duration{0, 100 * ms, 200 * ms} {
			r, err := bs.ReserveAt(ctx, t0, b, 1, -1)
			if err != nil || !r.OK || r.Wait != want {
				t.Errorf("Rate.Burst %d: step %d: got ok=%v wait=%v (%v), want ok wait=%v", burst, i, r.OK, r.Wait, err, want)
			}
		}
	}
	d := shaping.New(rdb, shaping.Config{Prefix: redistest.Prefix(t)})
	if err := d.Add(shaping.Downstream{Name: "api", Rate: limiters.Limit{Rate: 10, Period: time.Second, Burst: -1},
		Handler: func(context.Context, *shaping.Task) error { return nil }}); err != nil {
		t.Errorf("Add with Rate.Burst -1 = %v, want accepted (shaping does not read it)", err)
	}
}
