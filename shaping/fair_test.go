package shaping_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/testutil"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// fairRig parks tasks straight into a FairQueue (their asynq task hashes
// and scheduled entries written as asynq's enqueue writes them) and plays
// a worker that takes from pending, so the script's order can be read.
type fairRig struct {
	t      *testing.T
	rdb    redis.UniversalClient
	q      *shaping.FairQueue
	f      *shaping.Fairness
	aq     keys.AsynqQueue
	rate   limiters.Limit
	n      int
	prefix string
	now    time.Time // the scripts' clock, when set
}

func newFairRig(t *testing.T, f *shaping.Fairness) *fairRig {
	prefix := redistest.Prefix(t)
	rdb := redistest.Client(t)
	r := &fairRig{t: t, rdb: rdb, q: shaping.NewFairQueue(rdb, prefix), f: f, aq: keys.New(prefix).Asynq("api"),
		rate: limiters.PerSecond(10), prefix: prefix}
	return r
}

// at sets the scripts' clock to now and keeps it there.
func (r *fairRig) at(now time.Time) {
	r.now = now
	shaping.SetFairNow(r.q, func() time.Time { return r.now })
}

func (r *fairRig) park(key string, n int) {
	ctx := context.Background()
	for range n {
		id := fmt.Sprintf("%s-%d", key, r.n)
		r.n++
		r.rdb.HSet(ctx, r.aq.Task(id), "msg", "x", "state", "pending")
		r.rdb.LPush(ctx, r.aq.Pending(), id)
		if _, err := r.q.Park(ctx, "api", r.f, id, key, 1, time.Time{}); err != nil {
			r.t.Fatal(err)
		}
	}
}

// take plays a dispatcher: it takes up to n tasks one by one with
// take.lua (pending first, then fair order), feeding after each, and
// returns their keys in order.
func (r *fairRig) take(n int) []string {
	ctx := context.Background()
	sp := keys.New(r.prefix)
	fk := sp.Fair("api")
	store := lua.New(r.rdb)
	var out []string
	for range n {
		a := lua.TakeArgs{Bucket: sp.Bucket("api"), Queue: r.aq, Slots: 1, Budget: 1 << 20, Lease: time.Minute,
			Maintained: sp.TakeMaintained("api"), MaintainEvery: time.Hour, Fair: &fk, FairTTL: 25 * time.Hour}
		if !r.now.IsZero() {
			a.Now = r.now.UnixMicro()
		}
		rep, err := store.Take(ctx, a)
		if err != nil {
			r.t.Fatal(err)
		}
		if rep.Status != lua.TakeTaken {
			break
		}
		id := rep.Tasks[0].ID
		if st := r.rdb.HGet(ctx, r.aq.Task(id), "state").Val(); st != "active" {
			r.t.Errorf("task %s taken has state %q", id, st)
		}
		if r.rdb.ZScore(ctx, r.aq.Scheduled(), id).Err() != redis.Nil {
			r.t.Errorf("task %s taken is still scheduled", id)
		}
		out = append(out, id[:strings.IndexByte(id, '-')])
		if _, err := r.q.Feed(ctx, "api"); err != nil {
			r.t.Fatal(err)
		}
	}
	return out
}

func counts(ks []string) map[string]int {
	m := map[string]int{}
	for _, k := range ks {
		m[k]++
	}
	return m
}

// A key that arrives behind another's backlog is taken next, and then
// the keys alternate by weight; a key alone takes everything.
func TestFairOrderSharesByWeight(t *testing.T) {
	for _, tc := range []struct {
		name    string
		weights map[string]float64
		want    map[string]int // of the 45 taken after B and C came
	}{
		{"equal", nil, map[string]int{"A": 15, "B": 15, "C": 15}},
		{"2:1:1", map[string]float64{"A": 2}, map[string]int{"A": 22, "B": 11, "C": 11}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newFairRig(t, &shaping.Fairness{Weights: tc.weights})
			r.park("A", 200)
			if got := counts(r.take(20)); got["A"] != 20 {
				t.Fatalf("A alone: %v, want all 20 for A", got)
			}
			r.park("B", 50)
			r.park("C", 50)
			// the order is decided at the take: nothing of A's was taken
			// ahead, so B and C come first
			head := r.take(3)
			if c := counts(head[:2]); c["B"] != 1 || c["C"] != 1 {
				t.Errorf("first 3 taken after B and C arrived: %v, want B and C first", head)
			}
			got := counts(append(head, r.take(42)...))
			for k, w := range tc.want {
				if d := got[k] - w; d < -2 || d > 2 {
					t.Errorf("%s: %d of 45, want %d ± 2 (%v)", k, got[k], w, got)
				}
			}
		})
	}
}

// Parked tasks whose asynq entry is gone (deleted or archived by hand) are
// dropped, not taken twice; when all drain, the fair-share keys are gone
// or expire within a minute.
func TestFairFeedSkipsGoneTasksAndCleansUp(t *testing.T) {
	r := newFairRig(t, &shaping.Fairness{})
	ctx := context.Background()
	r.park("A", 10)
	// deleted as asynq's Inspector does: out of pending, its hash gone
	r.rdb.LRem(ctx, r.aq.Pending(), 1, "A-5")
	r.rdb.Del(ctx, r.aq.Task("A-5"))
	got := r.take(20)
	if len(got) != 9 {
		t.Errorf("took %d tasks, want 9 (one was gone)", len(got))
	}
	fk := keys.New(r.prefix).Fair("api")
	for _, k := range fk.List() {
		if ttl := r.rdb.PTTL(ctx, k).Val(); ttl != -2*time.Nanosecond && (ttl < 0 || ttl > time.Minute) {
			t.Errorf("%s has TTL %v after the queue drained, want gone or at most 1m", k, ttl)
		}
	}
}

// A per-key ceiling spaces one key's takes even when it is alone.
func TestFairKeyRateSpacesPromotions(t *testing.T) {
	r := newFairRig(t, &shaping.Fairness{KeyRate: limiters.PerSecond(5)})
	t0 := time.UnixMilli(time.Now().UnixMilli())
	r.at(t0)
	r.park("A", 5)
	r.park("B", 1)
	if got := counts(r.take(10)); got["A"] != 1 || got["B"] != 1 {
		t.Fatalf("took %v at once, want one A (the rest wait for the ceiling) and B", got)
	}
	for i, step := range []time.Duration{199 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 600 * time.Millisecond, 800 * time.Millisecond} {
		r.at(t0.Add(step))
		if _, err := r.q.Feed(context.Background(), "api"); err != nil {
			t.Fatal(err)
		}
		want := []int{0, 1, 1, 1, 1}[i]
		if got := len(r.take(10)); got != want {
			t.Errorf("at +%v: %d taken, want %d (A at 5/s)", step, got, want)
		}
	}
}

// Two dispatchers on a fair downstream: a backlog, then two more keys;
// every task is delivered exactly once.
func TestFairDispatchersDeliverEveryTaskOnce(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	f := &shaping.Fairness{}
	var mu sync.Mutex
	seen := map[string]int{}
	var ds []*shaping.Dispatcher
	for range 2 {
		d := shaping.New(rdb, shaping.Config{Prefix: prefix})
		d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(50), Fairness: f, Handler: func(ctx context.Context, tk *shaping.Task) error {
			mu.Lock()
			seen[string(tk.Payload)]++
			mu.Unlock()
			return nil
		}})
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
		t.Cleanup(func() { d.Shutdown(context.Background()) })
	}
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix, Fair: map[string]queue.FairShare{"api": {Fairness: f, Rate: limiters.PerSecond(50)}}})
	n := 0
	enq := func(key string, k int) {
		for range k {
			if _, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Key: key, Payload: []byte(fmt.Sprint(n))}); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	enq("A", 40)
	testutil.WaitFor(t, 10*time.Second, "A flowing", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) >= 10 })
	enq("B", 5)
	enq("C", 5)
	ok := testutil.Eventually(20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == n })
	mu.Lock()
	got := len(seen)
	mu.Unlock()
	if !ok {
		fk := prefix + ":fair:{" + prefix + ":api}:"
		t.Logf("parked %v later %v counts %v state %v", rdb.ZRangeWithScores(context.Background(), fk+"parked", 0, -1).Val(), rdb.ZCard(context.Background(), fk+"later").Val(), rdb.HGetAll(context.Background(), fk+"counts").Val(), rdb.HGetAll(context.Background(), fk+"state").Val())
		aq := "asynq:{" + prefix + ":api}:"
		t.Logf("pending %v active %v scheduled %v", rdb.LRange(context.Background(), aq+"pending", 0, -1).Val(), rdb.LRange(context.Background(), aq+"active", 0, -1).Val(), rdb.ZRangeWithScores(context.Background(), aq+"scheduled", 0, -1).Val())
		t.Fatalf("%d of %d delivered", got, n)
	}
	mu.Lock()
	defer mu.Unlock()
	for p, c := range seen {
		if c != 1 {
			t.Errorf("task %s delivered %d times, want once", p, c)
		}
	}
}

// A lone task goes to the front of pending even when pending is empty and
// the previous lone task has been taken.
func TestFairLoneTaskIntoEmptyPending(t *testing.T) {
	r := newFairRig(t, &shaping.Fairness{})
	r.park("A", 1)
	if got := r.take(5); len(got) != 1 {
		t.Fatalf("took %v, want A's task", got)
	}
	r.park("B", 1)
	if got := r.take(5); len(got) != 1 || got[0] != "B" {
		t.Fatalf("took %v after B's lone task, want [B]", got)
	}
}

// A key that arrives behind a backlog on a fair downstream is released
// within the take's look-ahead: its first task is next in fair order, so
// the next take reserves it the first slot after those already reserved,
// at most 100ms of them (fairLookAhead: 6 slots at 50/s; the issue's
// bound is 2 intervals + 100ms, 7). Counted in the backlog's releases
// between the newcomer's enqueue and its release: at most 6 (a take
// that handed out 200ms of slots would let about 10 pass).
func TestFairNewcomerPassesTheLookAhead(t *testing.T) {
	t.Parallel()
	const rate = 50
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	rec := newKeyRecorder()
	f := &shaping.Fairness{}
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix, Fair: map[string]queue.FairShare{"api": {Fairness: f, Rate: limiters.PerSecond(rate)}}})
	t.Cleanup(func() { p.Close() })
	enqueue := func(key string, i int) {
		t.Helper()
		_, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Key: key, Payload: []byte(fmt.Sprintf("%s-%d", key, i))})
		must(t, err)
	}
	for i := range 300 {
		enqueue("backlog", i)
	}
	d := shaping.New(rdb, shaping.Config{Prefix: prefix})
	must(t, d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(rate), Fairness: f, Handler: rec.handle}))
	must(t, d.Start())
	t.Cleanup(func() { d.Shutdown(context.Background()) })
	for i := range 5 {
		waitFor(t, 20*time.Second, "the backlog under way", func() bool { return rec.count("backlog") >= 20+20*i })
		key := fmt.Sprintf("new%d", i)
		before := rec.count("backlog")
		enqueue(key, 0)
		waitFor(t, 5*time.Second, key+"'s release", func() bool { return rec.count(key) == 1 })
		at := rec.times(key)[0]
		passed := 0
		for _, ts := range rec.times("backlog") {
			if ts.Before(at) {
				passed++
			}
		}
		if n := passed - before; n > 6 {
			t.Errorf("%s: %d of the backlog's releases between its enqueue and its release, want at most 6", key, n)
		}
	}
}

// The Jain index counts the keys released while another of their tasks
// waited in fair order (the take says so per task): A and B, enqueued 20
// each behind one another, had a backlog; C, a single task, had none.
func TestFairJainCountsKeysWithABacklog(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	rec := newKeyRecorder()
	f := &shaping.Fairness{}
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix, Fair: map[string]queue.FairShare{"api": {Fairness: f, Rate: limiters.PerSecond(200)}}})
	t.Cleanup(func() { p.Close() })
	for _, key := range []string{"A", "B", "C"} {
		n := 20
		if key == "C" {
			n = 1
		}
		for i := range n {
			_, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Key: key, Payload: []byte(fmt.Sprintf("%s-%d", key, i))})
			must(t, err)
		}
	}
	d := shaping.New(rdb, shaping.Config{Prefix: prefix})
	must(t, d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(200), Fairness: f, Handler: rec.handle}))
	must(t, d.Start())
	t.Cleanup(func() { d.Shutdown(context.Background()) })
	waitFor(t, 10*time.Second, "every release", func() bool { return rec.count("A")+rec.count("B")+rec.count("C") == 41 })
	if got := fmt.Sprint(d.FairBacklogged("api")); got != "[A B]" {
		t.Errorf("keys released with a backlog: %s, want [A B]", got)
	}
}
