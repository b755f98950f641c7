package shaping_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"io"
	"log/slog"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// A downstream whose hourly quota is spent holds no task (no release,
// nothing active, all pending in asynq's view, no attempt consumed), and
// a reset of the quota lets every task go, each once. The take reserves
// the slots of what it moves, tasks of one unit or of two alike, so past
// the quota it moves nothing (no task is taken to be given back).
func TestSpentQuotaHoldsNoTask(t *testing.T) {
	t.Parallel()
	for _, cost := range []int64{1, 2} {
		t.Run(fmt.Sprint("cost_", cost), func(t *testing.T) {
			t.Parallel()
			spentQuotaHoldsNoTask(t, cost)
		})
	}
}

func spentQuotaHoldsNoTask(t *testing.T, cost int64) {
	rdb, prefix, reg := redistest.Client(t), redistest.Prefix(t), prometheus.NewRegistry()
	d := shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: reg})
	t.Cleanup(func() { d.Shutdown(context.Background()) })
	rec := newRecorder()
	quotas := []shaping.Quota{{Limit: 3 * cost, Per: time.Hour}}
	must(t, d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(100), Quotas: quotas, Handler: rec.handle}))
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix})
	defer p.Close()
	in := queue.NewInspector(rdb, prefix)
	const n = 12
	for i := range n {
		_, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Cost: cost, Payload: fmt.Appendf(nil, "%d", i)})
		must(t, err)
	}
	must(t, d.Start())
	waitFor(t, 10*time.Second, "the quota's 3 releases", func() bool { return rec.count() >= 3 })

	var (
		b       queue.Backlog
		err     error
		pending []*asynq.TaskInfo
	)
	waitFor(t, 5*time.Second, "every other task back in pending, none active", func() bool {
		b, err = in.Backlog("api")
		must(t, err)
		return b.Active == 0 && b.Pending == n-3
	})
	// nothing is taken while the hold lasts (the engine asks its gate
	// every 250 ms): the backlog stays as it is and nothing is released
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		b, err = in.Backlog("api")
		must(t, err)
		if b.Active != 0 || rec.count() != 3 {
			t.Fatalf("during the hold: %d active, %d released; want 0 and 3", b.Active, rec.count())
		}
		time.Sleep(50 * time.Millisecond) // sampling a state that must not change, not waiting for one
	}
	pending, err = in.Asynq().ListPendingTasks(keys.New(prefix).Queue("api"), asynq.PageSize(100))
	must(t, err)
	for _, ti := range pending {
		if ti.Retried != 0 {
			t.Errorf("task %s retried %d times, want 0 (a give-back consumes no attempt)", ti.ID, ti.Retried)
		}
	}

	if _, err := d.Control().Reset(context.Background(), "api", quotas); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "3 more releases after the reset", func() bool { return rec.count() >= 6 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for p, c := range rec.seen {
		if c != 1 {
			t.Errorf("task %s released %d times, want once", p, c)
		}
	}
}
