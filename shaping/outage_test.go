package shaping_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// outageEnv is a dispatcher on a Redis of the test's own (appendonly,
// fsync always: its data survives a restart), so the test can take it away.
type outageEnv struct {
	srv    *redistest.Server
	rdb    *redis.Client
	prefix string
	reg    *prometheus.Registry
	d      *shaping.Dispatcher
	p      *queue.Producer
}

func newOutageEnv(t *testing.T) *outageEnv {
	t.Helper()
	if redistest.Cluster() {
		// the Redis here is the test's own, never the cluster: the cluster
		// pass would only run the first pass's test again
		t.Skip("runs on a Redis of its own, not on REDIS_CLUSTER_ADDRS")
	}
	srv, err := redistest.Start("--appendonly", "yes", "--appendfsync", "always")
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	e := &outageEnv{srv: srv, rdb: rdb, prefix: redistest.Prefix(t), reg: prometheus.NewRegistry()}
	e.d = shaping.New(rdb, shaping.Config{Prefix: e.prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		ShutdownTimeout: 5 * time.Second, RedisTimeout: 300 * time.Millisecond, RecoverAfter: 6 * time.Second, Registerer: e.reg})
	e.p = queue.NewProducer(rdb, queue.ProducerConfig{Prefix: e.prefix})
	t.Cleanup(func() {
		e.d.Shutdown(context.Background())
		e.p.Close()
		rdb.Close()
		srv.Stop()
		srv.Cleanup()
	})
	return e
}

// outage keeps Redis away for d, then brings it back with its data.
func (e *outageEnv) outage(t *testing.T, d time.Duration) {
	t.Helper()
	down := time.Now()
	e.srv.Stop()
	waitFor(t, d+time.Second, "the outage's length", func() bool { return time.Since(down) >= d })
	if err := e.srv.StartAgain(); err != nil {
		t.Fatal(err)
	}
}

// A task released while Redis is away: the write that marks it done
// fails. It must still leave the active list once Redis is back (kept as
// completed for its retention), and so never be recovered and delivered
// again: the engine retries that write.
func TestFinishSurvivesRedisOutage(t *testing.T) {
	t.Parallel()
	e := newOutageEnv(t)
	var calls atomic.Int32
	released := make(chan struct{})
	h := func(context.Context, *shaping.Task) error {
		if calls.Add(1) == 1 {
			e.srv.Stop() // the call succeeds, then asynq finds no Redis to record it in
			close(released)
		}
		return nil
	}
	must(t, e.d.Add(shaping.Downstream{Name: "ds", Rate: limiters.PerSecond(100), Workers: 2, Handler: h}))
	rc, err := e.p.Enqueue(context.Background(), queue.Task{Downstream: "ds", Payload: []byte("once")})
	must(t, err)
	must(t, e.d.Start())
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("the task was not released within 10s")
	}
	waitFor(t, 5*time.Second, "the failed finishing write retried", func() bool {
		return gatherSum(t, e.reg, "shaper_shaping_finish_retries_total") >= 1
	})
	e.outage(t, 2*time.Second)
	back := time.Now()
	q := keys.New(e.prefix).Asynq("ds")
	waitFor(t, 5*time.Second, "the task gone from active, completed", func() bool {
		ctx := context.Background()
		return e.rdb.LLen(ctx, q.Active()).Val() == 0 && e.rdb.ZScore(ctx, q.Completed(), rc.ID).Err() == nil &&
			e.rdb.ZCard(ctx, q.Lease()).Val() == 0
	})
	t.Logf("done recorded %v after Redis came back", time.Since(back).Round(time.Millisecond))
	must(t, e.d.Shutdown(context.Background()))
	if n := calls.Load(); n != 1 {
		t.Errorf("handler called %d times, want 1", n)
	}
}

// A dequeue whose reply is lost to an outage leaves its task in active
// under a lease no process extends (strand, with a fresh lease). After
// the outage the dispatcher scans for it: delivered once RecoverAfter has
// passed, not after asynq's lease expiry + 30s + its once-a-minute
// recoverer (60-120s). A task held through the same outage by a live
// worker, whose lease also went unextended for longer than RecoverAfter,
// is not taken: the scan waits for the heartbeat to extend it again.
func TestLostDequeueRecoveredAfterOutage(t *testing.T) {
	t.Parallel()
	e := newOutageEnv(t)
	rec := newRecorder()
	var held atomic.Int32
	holding, letGo := make(chan struct{}), make(chan struct{})
	h := func(ctx context.Context, tk *shaping.Task) error {
		if string(tk.Payload) == "held" && held.Add(1) == 1 {
			close(holding)
			<-letGo
		}
		return rec.handle(ctx, tk)
	}
	must(t, e.d.Add(shaping.Downstream{Name: "ds", Rate: limiters.PerSecond(100), Workers: 2, Handler: h}))
	strand(t, e.rdb, e.p, e.prefix, "ds", 1, 0) // dequeued just now; its reply never came
	stranded := time.Now()
	_, err := e.p.Enqueue(context.Background(), queue.Task{Downstream: "ds", Payload: []byte("held")})
	must(t, err)
	must(t, e.d.Start()) // its start-up scan leaves the fresh lease alone
	select {
	case <-holding:
	case <-time.After(10 * time.Second):
		t.Fatal("the held task was not released within 10s")
	}
	e.outage(t, 8*time.Second) // longer than RecoverAfter (6s)
	waitFor(t, 25*time.Second, "the stranded task delivered", func() bool { return rec.seen0() >= 1 })
	t.Logf("delivered %v after it was stranded (RecoverAfter 6s; after trouble, scans wait 7s for heartbeats)", time.Since(stranded).Round(time.Millisecond))
	close(letGo)
	waitFor(t, 5*time.Second, "the held call done", func() bool { return rec.count() >= 2 })
	must(t, e.d.Shutdown(context.Background()))
	if c, n := rec.seen["0"], held.Load(); c != 1 || n != 1 {
		t.Errorf("stranded task delivered %d times, the held one %d: want 1 and 1", c, n)
	}
}

func (r *recorder) seen0() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen["0"]
}
