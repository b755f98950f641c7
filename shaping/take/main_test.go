package take

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// rig is a test's key space on the shared test Redis, with asynq's own
// Client and Inspector on it.
type rig struct {
	t    *testing.T
	rdb  redis.UniversalClient
	sp   keys.Space
	cl   *asynq.Client
	insp *asynq.Inspector
}

func newRig(t *testing.T) *rig {
	t.Helper()
	rdb := redistest.Client(t)
	return &rig{t: t, rdb: rdb, sp: keys.New(redistest.Prefix(t)), cl: asynq.NewClientFromRedisClient(rdb),
		insp: asynq.NewInspectorFromRedisClient(rdb)}
}

// enqueue enqueues n tasks of type typ to downstream ds with asynq's Client
// and returns their ids in order.
func (r *rig) enqueue(ds, typ string, n int, opts ...asynq.Option) []string {
	r.t.Helper()
	var ids []string
	opts = append([]asynq.Option{asynq.Queue(r.sp.Queue(ds))}, opts...)
	for i := range n {
		info, err := r.cl.Enqueue(asynq.NewTask(typ, []byte{byte(i), byte(i >> 8)}), opts...)
		if err != nil {
			r.t.Fatal(err)
		}
		ids = append(ids, info.ID)
	}
	return ids
}

// engine returns an engine on rdb (the rig's client when nil) with test
// defaults: quiet logs, quick maintenance.
func (r *rig) engine(rdb redis.UniversalClient, cfg Config, ds ...Downstream) *Engine {
	r.t.Helper()
	cfg.Redis = rdb
	if rdb == nil {
		cfg.Redis = r.rdb
	}
	cfg.Keys = r.sp
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Maintain == 0 {
		cfg.Maintain = 200 * time.Millisecond
	}
	e, err := New(cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, d := range ds {
		if err := e.Add(d); err != nil {
			r.t.Fatal(err)
		}
	}
	return e
}

// start runs e until the test ends or the returned stop is called; stop
// waits for Run to return.
func start(t *testing.T, e *Engine) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond) // poll interval, bounded by the deadline
	}
}

// queueInfo reads asynq's view of downstream ds's queue.
func (r *rig) queueInfo(ds string) *asynq.QueueInfo {
	r.t.Helper()
	qi, err := r.insp.GetQueueInfo(r.sp.Queue(ds))
	if err != nil {
		r.t.Fatal(err)
	}
	return qi
}

// recorder records handler calls.
type recorder struct {
	mu    sync.Mutex
	at    []time.Time
	count map[string]int
}

func newRecorder() *recorder { return &recorder{count: map[string]int{}} }

func (c *recorder) add(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = append(c.at, time.Now())
	c.count[id]++
}

func (c *recorder) calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.at)
}

// maxInWindow is the most calls in any window of length w.
func (c *recorder) maxInWindow(w time.Duration) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	best, lo := 0, 0
	for hi := range c.at {
		for c.at[hi].Sub(c.at[lo]) >= w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}
