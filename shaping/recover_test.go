package shaping_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// strand makes n tasks of downstream ds look held by a process that died
// long ago: dequeued as asynq does (pending → active, a lease), with the
// lease last extended leaseAge ago.
func strand(t *testing.T, rdb redis.UniversalClient, p *queue.Producer, prefix, ds string, n int, leaseAge time.Duration) {
	t.Helper()
	strandFrom(t, rdb, p, prefix, ds, 0, n, leaseAge)
}

// strandFrom is strand with payloads first, first+1, ….
func strandFrom(t *testing.T, rdb redis.UniversalClient, p *queue.Producer, prefix, ds string, first, n int, leaseAge time.Duration) {
	t.Helper()
	ctx := context.Background()
	q := keys.New(prefix).Asynq(ds)
	for i := first; i < first+n; i++ {
		if _, err := p.Enqueue(ctx, queue.Task{Downstream: ds, Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		id, err := rdb.RPopLPush(ctx, q.Pending(), q.Active()).Result()
		if err != nil {
			t.Fatal(err)
		}
		rdb.HSet(ctx, q.Task(id), "state", "active")
		rdb.ZAdd(ctx, q.Lease(), redis.Z{Score: float64(time.Now().Add(30*time.Second - leaseAge).Unix()), Member: id})
	}
}

// A dead process's held tasks come back long before asynq's recoverer
// would (lease expiry + 30s), are delivered once, and consume no attempt.
func TestDeadProcessTasksRecoveredFast(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rec := newRecorder()
	var mu sync.Mutex
	var retried []int
	h := func(ctx context.Context, tk *shaping.Task) error {
		mu.Lock()
		retried = append(retried, tk.Retried)
		mu.Unlock()
		return rec.handle(ctx, tk)
	}
	must(t, e.d.Add(shaping.Downstream{Name: "ds", Rate: limiters.PerSecond(200), Workers: 10, Handler: h}))
	strand(t, e.rdb, e.p, e.prefix, "ds", 30, 15*time.Second) // not extended for 15s: dead
	started := time.Now()
	must(t, e.d.Start())
	waitFor(t, 10*time.Second, "30 stranded tasks delivered", func() bool { return rec.count() >= 30 })
	t.Logf("30 stranded tasks delivered %v after start (asynq alone: after lease expiry + 30s, here 45s)", time.Since(started).Round(time.Millisecond))
	for i := range 30 {
		if c := rec.seen[fmt.Sprint(i)]; c != 1 {
			t.Errorf("task %d delivered %d times, want 1", i, c)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, r := range retried {
		if r != 0 {
			t.Errorf("a recovered task ran with Retried=%d, want 0 (recovery consumes no attempt)", r)
		}
	}
}

// Leases still being extended (a live process) are never taken.
func TestLiveLeasesNotRecovered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rec := newRecorder()
	must(t, e.d.Add(shaping.Downstream{Name: "ds", Rate: limiters.PerSecond(200), Workers: 10, Handler: rec.handle}))
	strand(t, e.rdb, e.p, e.prefix, "ds", 5, 2*time.Second) // extended 2s ago: alive
	must(t, e.d.Start())
	in := queue.NewInspector(e.rdb, e.prefix)
	// the start-up scan has run once the dispatcher serves new tasks
	_, err := e.p.Enqueue(context.Background(), queue.Task{Downstream: "ds", Payload: []byte("probe")})
	must(t, err)
	waitFor(t, 10*time.Second, "the probe delivered", func() bool { return rec.count() >= 1 })
	b, err := in.Counts(context.Background(), "ds")
	must(t, err)
	if b.Active != 5 || rec.count() != 1 {
		t.Errorf("active %d, delivered %d: want the 5 live-held tasks left alone and only the probe delivered", b.Active, rec.count())
	}
}

// shaper's recovery and asynq's own recoverer run at once (asynq's runs at
// every server start) over dead leases of both ages: recent ones (not
// extended for 15s: shaper's) and long expired ones (asynq's: it lists
// them first and moves them one by one later). Each task is moved by
// exactly one of them, so it is delivered once and never lost.
func TestRecoveryRacesAsynqRecoverer(t *testing.T) {
	t.Parallel()
	for round := range 3 {
		e := newEnv(t)
		var mu sync.Mutex
		seen := map[string]int{}
		h := func(_ context.Context, payload []byte) {
			mu.Lock()
			seen[string(payload)]++
			mu.Unlock()
		}
		must(t, e.d.Add(shaping.Downstream{Name: "ds", Rate: limiters.PerSecond(500), Workers: 10,
			Handler: func(ctx context.Context, tk *shaping.Task) error { h(ctx, tk.Payload); return nil }}))
		const n = 60
		strand(t, e.rdb, e.p, e.prefix, "ds", n/2, 100*time.Second)         // expired 70s ago: asynq's recoverer takes these
		strandFrom(t, e.rdb, e.p, e.prefix, "ds", n/2, n/2, 15*time.Second) // silent for 15s: shaper's
		var srvs []*asynq.Server
		for range 2 {
			srv := asynq.NewServerFromRedisClient(e.rdb, asynq.Config{Concurrency: 5, Queues: map[string]int{keys.New(e.prefix).Queue("ds"): 1},
				LogLevel: asynq.FatalLevel, RetryDelayFunc: func(int, error, *asynq.Task) time.Duration { return 0 }})
			srvs = append(srvs, srv)
		}
		var wg sync.WaitGroup
		for _, srv := range srvs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				srv.Start(asynq.HandlerFunc(func(ctx context.Context, tk *asynq.Task) error { h(ctx, tk.Payload()); return nil }))
			}()
		}
		must(t, e.d.Start())
		wg.Wait()
		waitFor(t, 20*time.Second, fmt.Sprintf("round %d: %d tasks delivered", round, n), func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(seen) >= n
		})
		for _, srv := range srvs {
			srv.Shutdown()
		}
		mu.Lock()
		for i := range n {
			if c := seen[fmt.Sprint(i)]; c != 1 {
				t.Errorf("round %d: task %d delivered %d times, want 1", round, i, c)
			}
		}
		mu.Unlock()
	}
}
