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

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/testsink"
	"github.com/shaper-io/shaper/internal/testutil"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

type env struct {
	t      *testing.T
	rdb    redis.UniversalClient
	prefix string
	d      *shaping.Dispatcher
	p      *queue.Producer
	in     *queue.Inspector
}

func newEnv(t *testing.T) *env {
	t.Helper()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	e := &env{t: t, rdb: rdb, prefix: prefix,
		d:  shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ShutdownTimeout: 5 * time.Second}),
		p:  queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix}),
		in: queue.NewInspector(rdb, prefix)}
	t.Cleanup(func() { e.d.Shutdown(context.Background()) })
	return e
}

func (e *env) enqueue(ds string, n int, mod func(i int, t *queue.Task)) {
	e.t.Helper()
	for i := 0; i < n; i++ {
		task := queue.Task{Downstream: ds, Payload: []byte(fmt.Sprint(i))}
		if mod != nil {
			mod(i, &task)
		}
		if _, err := e.p.Enqueue(context.Background(), task); err != nil {
			e.t.Fatalf("enqueue: %v", err)
		}
	}
}

// recorder notes every release.
type recorder struct {
	mu    sync.Mutex
	times []time.Time
	seen  map[string]int
}

func newRecorder() *recorder { return &recorder{seen: map[string]int{}} }

func (r *recorder) handle(ctx context.Context, t *shaping.Task) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.times = append(r.times, time.Now())
	r.seen[string(t.Payload)]++
	return nil
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.times)
}

var waitFor = testutil.WaitFor

func maxInWindow(ts []time.Time, w time.Duration) int { return testsink.MaxInWindow(ts, w) }

func achieved(ts []time.Time) float64 { return testsink.Rate(ts) }

func TestDispatcherReleasesAtRate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rec := newRecorder()
	if err := e.d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(20), Workers: 8, Handler: rec.handle}); err != nil {
		t.Fatal(err)
	}
	e.enqueue("api", 60, nil)
	if err := e.d.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "60 releases", func() bool { return rec.count() >= 60 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if m := maxInWindow(rec.times, time.Second); m > 21 {
		t.Errorf("max releases in a 1s window = %d, want <= rate+1 = 21", m)
	}
	if m := maxInWindow(rec.times, 50*time.Millisecond); m > 2 {
		t.Errorf("max releases in a 50ms window = %d, want <= 2 (spacing 50ms)", m)
	}
	// Never faster; "keeps up" within 10% here, where the race detector and
	// other packages share two cores (a worker that wakes too late wastes
	// its slot). The multi-process fidelity test and the benchmarks hold
	// the tighter claims.
	if r := achieved(rec.times); r < 0.9*20 || r > 20.5 {
		t.Errorf("achieved rate %.2f/s, want within [18, 20.5]", r)
	}
	for i := 0; i < 60; i++ {
		if n := rec.seen[fmt.Sprint(i)]; n != 1 {
			t.Errorf("task %d delivered %d times, want 1", i, n)
		}
	}
}

func TestThrottledDownstreamDoesNotStarveAnother(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	slow, fast := newRecorder(), newRecorder()
	must(t, e.d.Add(shaping.Downstream{Name: "slow", Rate: limiters.PerSecond(2), Workers: 4, MaxWait: 10 * time.Second, Handler: slow.handle}))
	must(t, e.d.Add(shaping.Downstream{Name: "fast", Rate: limiters.PerSecond(200), Workers: 20, Handler: fast.handle}))
	e.enqueue("slow", 200, nil)
	e.enqueue("fast", 300, nil)
	must(t, e.d.Start())
	waitFor(t, 20*time.Second, "fast drained", func() bool { return fast.count() >= 300 })
	fast.mu.Lock()
	r := achieved(fast.times)
	fast.mu.Unlock()
	// Starved by the slow one's held tasks, fast would crawl; half its rate
	// leaves room for the race detector and other packages on two loaded
	// cores (179.9/s in a full-suite run; 148.8/s with other suites beside
	// it). No benchmark measures this pair yet.
	t.Logf("fast downstream: %.1f/s of 200/s next to a throttled one", r)
	if r < 0.5*200 {
		t.Errorf("fast downstream achieved %.1f/s next to a throttled one, want >= 100/s", r)
	}
	b, err := e.in.Backlog("slow")
	must(t, err)
	if b.Total() < 150 {
		t.Errorf("slow backlog %d: the throttled downstream went faster than its rate", b.Total())
	}
}

func TestMaxRetryZeroNeverArchivedByThrottling(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var mu sync.Mutex
	pushedBack := map[string]bool{}
	rec := newRecorder()
	h := func(ctx context.Context, task *shaping.Task) error {
		mu.Lock()
		first := !pushedBack[string(task.Payload)]
		pushedBack[string(task.Payload)] = true
		mu.Unlock()
		if first && task.Payload[0]%3 == 0 { // a third of the tasks hear "429, retry after 50ms" once
			return shaping.Throttled(50*time.Millisecond, errors.New("429"))
		}
		return rec.handle(ctx, task)
	}
	// 10 workers, max wait 100ms at 40/s: the bucket holds 4, so most
	// reservations are refused and tasks wait, many times over.
	must(t, e.d.Add(shaping.Downstream{Name: "tight", Rate: limiters.PerSecond(40), Workers: 10, MaxWait: 100 * time.Millisecond, Handler: h}))
	zero := 0
	e.enqueue("tight", 60, func(i int, t *queue.Task) { t.MaxRetry = &zero })
	must(t, e.d.Start())
	waitFor(t, 30*time.Second, "60 deliveries", func() bool { return rec.count() >= 60 })
	b, err := e.in.Backlog("tight")
	must(t, err)
	if b.Archived != 0 || b.Retry != 0 {
		t.Errorf("archived=%d retry=%d, want 0 and 0: throttling must not consume attempts", b.Archived, b.Retry)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i := 0; i < 60; i++ {
		if rec.seen[fmt.Sprint(i)] != 1 {
			t.Errorf("task %d delivered %d times, want 1", i, rec.seen[fmt.Sprint(i)])
		}
	}
}

func TestPoisonTasksAreArchivedWithReason(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rec := newRecorder()
	h := func(ctx context.Context, task *shaping.Task) error {
		switch string(task.Payload) {
		case "panic":
			panic("boom")
		case "fail":
			return errors.New("downstream said 500")
		case "permanent":
			return shaping.Permanent(errors.New("downstream said 400"))
		}
		return rec.handle(ctx, task)
	}
	must(t, e.d.Add(shaping.Downstream{Name: "ds", Rate: limiters.PerSecond(100), Workers: 4, Handler: h}))
	zero := 0
	for _, p := range []string{"panic", "fail", "permanent", "ok"} {
		_, err := e.p.Enqueue(context.Background(), queue.Task{Downstream: "ds", Payload: []byte(p), MaxRetry: &zero})
		must(t, err)
	}
	// a task from plain asynq with a malformed header
	c := asynq.NewClientFromRedisClient(e.rdb)
	_, err := c.Enqueue(asynq.NewTaskWithHeaders("x", []byte("bad"), map[string]string{"shaper-cost": "abc"}), asynq.Queue(e.prefix+":ds"))
	must(t, err)
	must(t, e.d.Start())
	waitFor(t, 15*time.Second, "4 archived, 1 delivered", func() bool {
		b, err := e.in.Backlog("ds")
		return err == nil && b.Archived == 4 && rec.count() == 1
	})
	archived, err := e.in.Archived("ds", 10)
	must(t, err)
	want := map[string]string{"panic": "boom", "fail": "downstream said 500", "permanent": "downstream said 400", "bad": "shaper-cost"}
	for _, a := range archived {
		if w := want[string(a.Payload)]; !strings.Contains(a.LastErr, w) {
			t.Errorf("archived %q with error %q, want it to mention %q", a.Payload, a.LastErr, w)
		}
	}
}

func TestPushBackPausesEveryWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var mu sync.Mutex
	var times []time.Time
	var pushedAt time.Time
	h := func(ctx context.Context, task *shaping.Task) error {
		mu.Lock()
		defer mu.Unlock()
		times = append(times, time.Now())
		if string(task.Payload) == "5" && pushedAt.IsZero() {
			pushedAt = time.Now()
			return shaping.Throttled(time.Second, errors.New("429 Retry-After: 1"))
		}
		return nil
	}
	must(t, e.d.Add(shaping.Downstream{Name: "ds", Rate: limiters.PerSecond(50), Workers: 10, MaxWait: 2 * time.Second, Handler: h}))
	e.enqueue("ds", 30, nil)
	must(t, e.d.Start())
	waitFor(t, 15*time.Second, "31 calls", func() bool { mu.Lock(); defer mu.Unlock(); return len(times) >= 31 })
	mu.Lock()
	defer mu.Unlock()
	// Slots reserved before the pushback may still fire (they were granted
	// earlier and hold at most MaxWait's worth); none may be reserved inside it.
	var inside int
	for _, ts := range times {
		if ts.After(pushedAt.Add(100*time.Millisecond)) && ts.Before(pushedAt.Add(950*time.Millisecond)) {
			inside++
		}
	}
	// Slots already granted before the 429 (up to the bucket's depth) may
	// still run; every later slot must lie past the pause.
	if inside > 10 {
		t.Errorf("%d releases inside the 1s pause, want only those reserved before it (<= workers)", inside)
	}
	b, _ := e.in.Backlog("ds")
	if b.Archived+b.Retry != 0 {
		t.Errorf("archived+retry = %d, want 0", b.Archived+b.Retry)
	}
}

func TestShutdownReturnsHeldTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rec := newRecorder()
	must(t, e.d.Add(shaping.Downstream{Name: "ds", Rate: limiters.PerSecond(2), Workers: 6, MaxWait: 10 * time.Second, Handler: rec.handle}))
	zero := 0
	e.enqueue("ds", 12, func(i int, t *queue.Task) { t.MaxRetry = &zero })
	must(t, e.d.Start())
	// taken and waiting for its slot: the take's look-ahead (150ms) holds
	// one slot at 2/s (a FIFO downstream's take moves a task only with
	// its slot)
	waitFor(t, 10*time.Second, "a task held", func() bool {
		b, _ := e.in.Backlog("ds")
		return b.Active >= 1 && rec.count() >= 1
	})
	start := time.Now()
	must(t, e.d.Shutdown(context.Background()))
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("shutdown took %v with only held tasks, want prompt", d)
	}
	b, err := e.in.Backlog("ds")
	must(t, err)
	if b.Active != 0 || b.Archived != 0 || b.Retry != 0 || b.Pending+rec.count() != 12 {
		t.Errorf("after shutdown: %+v, delivered %d; want every task pending or delivered, none archived or retried", b, rec.count())
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
