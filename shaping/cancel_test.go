package shaping_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// Cancelling active tasks through queue.Inspector.Cancel (what DELETE and
// shaper ctl cancel call): at 2/s, the task in its call has its context
// cancelled with shaping.ErrCancelled, the one taken and waiting for its
// slot is removed unsent, neither is retried or counted against the
// breaker, and the rest are delivered once.
func TestCancelActiveTasks(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	reg := prometheus.NewRegistry()
	d := shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: reg})
	defer d.Shutdown(context.Background())
	var mu sync.Mutex
	calls := map[string]int{}
	inCall := make(chan struct{}, 1)
	cause := make(chan error, 1)
	must(t, d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(2), MaxWait: 5 * time.Second,
		Breaker: &shaping.Breaker{}, Handler: func(ctx context.Context, task *shaping.Task) error {
			mu.Lock()
			calls[string(task.Payload)]++
			mu.Unlock()
			if string(task.Payload) != "slow" {
				return nil
			}
			inCall <- struct{}{}
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return ctx.Err()
		}}))
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix})
	defer p.Close()
	ids := map[string]string{}
	for _, name := range []string{"slow", "waits", "a", "b"} {
		rc, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Payload: []byte(name)})
		must(t, err)
		ids[name] = rc.ID
	}
	must(t, d.Start())
	<-inCall
	in := queue.NewInspector(rdb, prefix)
	waitFor(t, 2*time.Second, "the next task taken", func() bool {
		info, err := in.Asynq().GetTaskInfo(prefix+":api", ids["waits"])
		return err == nil && info.State == asynq.TaskStateActive
	})
	cancelAt := time.Now()
	for _, name := range []string{"waits", "slow"} {
		st, err := in.Cancel("api", ids[name])
		if err != nil || st != asynq.TaskStateActive {
			t.Fatalf("Cancel(%s): %v, %v; want active, nil", name, st, err)
		}
	}
	select {
	case c := <-cause:
		if !errors.Is(c, shaping.ErrCancelled) {
			t.Errorf("the call's context ended with cause %v, want shaping.ErrCancelled", c)
		}
		// asynq's cancellation channel is pub/sub: the handler sees it at once
		if d := time.Since(cancelAt); d > time.Second {
			t.Errorf("the call's context ended %v after the cancel, want within 1s", d.Round(time.Millisecond))
		} else {
			t.Logf("the call's context ended %v after the cancel", d.Round(time.Millisecond))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the call in progress was not cut within 5s")
	}
	waitFor(t, 10*time.Second, "a and b delivered, the queue empty", func() bool {
		c, err := in.Counts(context.Background(), "api")
		mu.Lock()
		defer mu.Unlock()
		return err == nil && calls["a"] == 1 && calls["b"] == 1 && c.Pending+c.Active+c.Retry+c.Archived == 0
	})
	mu.Lock()
	if calls["waits"] != 0 || calls["slow"] != 1 {
		t.Errorf("calls %v: want slow once (cut) and waits never", calls)
	}
	mu.Unlock()
	for name, when := range map[string]string{"waits": "before_call", "slow": "during_call"} {
		if _, err := in.Asynq().GetTaskInfo(prefix+":api", ids[name]); !errors.Is(err, asynq.ErrTaskNotFound) {
			t.Errorf("cancelled %s: %v, want removed", name, err)
		}
		if n := counterSum(t, reg, "shaper_shaping_cancelled_tasks_total", "when", when); n != 1 {
			t.Errorf("cancelled_tasks_total{when=%s} = %v, want 1", when, n)
		}
	}
	if n := counterSum(t, reg, "shaper_shaping_handler_outcomes_total", "outcome", "retry"); n != 0 {
		t.Errorf("%v retry outcomes, want 0 (a cancel is not a failure)", n)
	}
	if n := counterSum(t, reg, "shaper_shaping_handler_outcomes_total", "outcome", "cancelled"); n != 1 {
		t.Errorf("%v cancelled outcomes, want 1", n)
	}
}
