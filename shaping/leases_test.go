package shaping_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// inflight counts calls in flight, overall and per key, and remembers the
// most seen at once.
type inflight struct {
	mu           sync.Mutex
	now, max     int
	perKey       map[string]int
	maxKey       int
	seen         map[string]int
	callDuration time.Duration
}

func newInflight(d time.Duration) *inflight {
	return &inflight{perKey: map[string]int{}, seen: map[string]int{}, callDuration: d}
}

func (f *inflight) handle(ctx context.Context, t *shaping.Task) error {
	f.mu.Lock()
	f.now++
	f.perKey[t.Key]++
	f.max = max(f.max, f.now)
	f.maxKey = max(f.maxKey, f.perKey[t.Key])
	f.seen[string(t.Payload)]++
	f.mu.Unlock()
	time.Sleep(f.callDuration) // the downstream's call time, which the cap is about
	f.mu.Lock()
	f.now--
	f.perKey[t.Key]--
	f.mu.Unlock()
	return nil
}

func (f *inflight) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.seen {
		n += c
	}
	return n
}

// dispatchers starts n dispatchers (separate processes as far as Redis can
// tell: own clients' goroutines, own lanes) on one downstream.
func dispatchers(t *testing.T, rdb redis.UniversalClient, prefix string, n int, ds shaping.Downstream) []*shaping.Dispatcher {
	t.Helper()
	var out []*shaping.Dispatcher
	for range n {
		d := shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ShutdownTimeout: 5 * time.Second})
		must(t, d.Add(ds))
		must(t, d.Start())
		t.Cleanup(func() { d.Shutdown(context.Background()) })
		out = append(out, d)
	}
	return out
}

// Three dispatchers, concurrency 5, calls of 200ms: never more than 5 in
// flight, every task once, and the cap is used (not fewer than 4 at once
// under a backlog). The take decides the cap: a task leaves pending only
// with a place among the calls (lua.TakeLeases), so asynq's active list
// holds the cap's 5 tasks and at most as many more whose calls ended and
// whose finishing writes are on their way (the place is freed at the
// call's end): at most 10, where taking ahead of the leases could hold
// 200ms of the rate per process (about 8 each) waiting for a place.
func TestConcurrencyCapAcrossDispatchers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := newInflight(200 * time.Millisecond)
	const n = 60
	e.enqueue("db", n, nil)
	in := queue.NewInspector(e.rdb, e.prefix)
	dispatchers(t, e.rdb, e.prefix, 3, shaping.Downstream{Name: "db", Rate: limiters.PerSecond(100), Concurrency: 5, Handler: f.handle})
	maxActive := 0
	waitFor(t, 30*time.Second, fmt.Sprintf("%d calls", n), func() bool {
		b, err := in.Backlog("db")
		must(t, err)
		maxActive = max(maxActive, b.Active)
		return f.count() >= n
	})
	t.Logf("asynq's active list held at most %d tasks", maxActive)
	if maxActive > 2*5 {
		t.Errorf("asynq's active list held %d tasks, want at most twice the cap (10): a task is taken only with its place", maxActive)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.max > 5 {
		t.Errorf("%d calls in flight at once, want at most 5", f.max)
	}
	if f.max < 4 {
		t.Errorf("at most %d calls in flight at once under a backlog, want the cap (5) used", f.max)
	}
	for i := range n {
		if c := f.seen[fmt.Sprint(i)]; c != 1 {
			t.Errorf("task %d delivered %d times, want 1", i, c)
		}
	}
}

// key_concurrency 1 with 10 keys, 3 dispatchers: never two calls of one
// key at once, and a key at its cap does not hold up the others (several
// keys in flight). The take decides the cap (it passes over the tasks of
// a key at its cap, which stay in pending), so asynq's active list holds
// only the calls' tasks and those finishing: at most twice the 10 places.
func TestKeyConcurrencyOnePerKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := newInflight(50 * time.Millisecond)
	const n = 100
	e.enqueue("api", n, func(i int, task *queue.Task) { task.Key = fmt.Sprintf("tenant-%d", i%10) })
	dispatchers(t, e.rdb, e.prefix, 3, shaping.Downstream{Name: "api", Rate: limiters.PerSecond(500), KeyConcurrency: 1, Handler: f.handle})
	checkKeyCapOfOne(t, e, f, n)
}

// checkKeyCapOfOne waits for n calls over 10 keys under key_concurrency 1
// and checks them: asynq's active list at most twice the 10 places (the
// calls' tasks, and those whose finishing writes are on their way), never
// two calls of one key at once, several keys in flight together, and
// every task delivered once.
func checkKeyCapOfOne(t *testing.T, e *env, f *inflight, n int) {
	t.Helper()
	ctx := context.Background()
	active, maxActive := keys.New(e.prefix).Asynq("api").Active(), int64(0)
	waitFor(t, 30*time.Second, fmt.Sprintf("%d calls", n), func() bool {
		maxActive = max(maxActive, e.rdb.LLen(ctx, active).Val())
		return f.count() >= n
	})
	t.Logf("active list at most %d; calls in flight at most %d", maxActive, f.max)
	if maxActive > 2*10 {
		t.Errorf("asynq's active list held %d tasks, want at most twice the places (20): a task is taken only with its place", maxActive)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.maxKey > 1 {
		t.Errorf("%d calls of one key in flight at once, want at most 1", f.maxKey)
	}
	if f.max < 5 {
		t.Errorf("at most %d calls in flight at once over 10 keys, want several (a full key must not block the others)", f.max)
	}
	for i := range n {
		if c := f.seen[fmt.Sprint(i)]; c != 1 {
			t.Errorf("task %d delivered %d times, want 1", i, c)
		}
	}
}

// key_concurrency 1 on a fair downstream, 3 dispatchers, 10 tenants and
// one of them with a backlog five times the others': the take decides
// the cap per key (a key at its cap has its tasks held aside until one
// of its calls ends), so never two calls of one key at once, the others
// are not held up (several keys in flight), every task goes once, and
// asynq's active list holds only the calls' tasks and those finishing:
// at most twice the 10 places, where workers taking ahead of the leases
// held their whole budget waiting.
func TestFairKeyConcurrencyAtTheTake(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	f := newInflight(50 * time.Millisecond)
	fair := &shaping.Fairness{}
	p := queue.NewProducer(e.rdb, queue.ProducerConfig{Prefix: e.prefix, Fair: map[string]queue.FairShare{"api": {Fairness: fair, Rate: limiters.PerSecond(500)}}})
	n := 0
	enq := func(key string, k int) {
		for range k {
			_, err := p.Enqueue(ctx, queue.Task{Downstream: "api", Key: key, Payload: []byte(fmt.Sprint(n))})
			must(t, err)
			n++
		}
	}
	enq("tenant-0", 50)
	for i := 1; i < 10; i++ {
		enq(fmt.Sprint("tenant-", i), 10)
	}
	dispatchers(t, e.rdb, e.prefix, 3, shaping.Downstream{Name: "api", Rate: limiters.PerSecond(500), KeyConcurrency: 1, Fairness: fair, Handler: f.handle})
	checkKeyCapOfOne(t, e, f, n)
}

// Leases of a crashed process (never released, never renewed) free their
// places within the lease time; the survivors then use the whole cap.
func TestDeadProcessLeasesExpire(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	sp := keys.New(e.prefix)
	// a dead process holds both places of a cap of 2, leases due in 1.5s
	exp := float64(time.Now().Add(1500 * time.Millisecond).UnixMicro())
	must(t, e.rdb.ZAdd(ctx, sp.Leases("db"), redis.Z{Score: exp, Member: "dead1|"}, redis.Z{Score: exp, Member: "dead2|"}).Err())
	f := newInflight(10 * time.Millisecond)
	e.enqueue("db", 10, nil)
	start := time.Now()
	dispatchers(t, e.rdb, e.prefix, 1, shaping.Downstream{Name: "db", Rate: limiters.PerSecond(100), Concurrency: 2, LeaseTime: time.Second, Handler: f.handle})
	waitFor(t, 10*time.Second, "10 calls", func() bool { return f.count() >= 10 })
	if took := time.Since(start); took < time.Second {
		t.Errorf("10 calls done %v after start, before the dead leases expired (1.5s): the cap was not enforced", took)
	}
	waitFor(t, 5*time.Second, "the leases all given back", func() bool { return e.rdb.ZCard(ctx, sp.Leases("db")).Val() == 0 })
	if ttl := e.rdb.PTTL(ctx, sp.Leases("db")).Val(); ttl > 0 {
		t.Errorf("an empty lease set has a TTL of %v: it should be gone", ttl)
	}
}

// A call longer than the lease time renews its lease: with a cap of 1, no
// second call starts while the first (2.5 × the lease time) runs.
func TestLongCallRenewsLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := newInflight(2500 * time.Millisecond)
	e.enqueue("db", 2, nil)
	dispatchers(t, e.rdb, e.prefix, 2, shaping.Downstream{Name: "db", Rate: limiters.PerSecond(100), Concurrency: 1, LeaseTime: time.Second, Handler: f.handle})
	waitFor(t, 15*time.Second, "2 calls", func() bool { return f.count() >= 2 })
	waitFor(t, 5*time.Second, "both calls done", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.now == 0 })
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.max > 1 {
		t.Errorf("%d calls in flight at once with a cap of 1: a long call lost its lease", f.max)
	}
}
