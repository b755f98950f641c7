package queue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// On a fair downstream with on_late: reject, a task whose place in fair
// order comes after its deadline is refused at enqueue (Outcome Late,
// nothing left in asynq), while another key's task with the same deadline
// starts at once and is accepted, each with its expected start.
func TestFairLateRejectAtEnqueue(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	rate := limiters.PerSecond(10)
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix,
		Fair:    map[string]queue.FairShare{"api": {Fairness: &shaping.Fairness{}, Rate: rate}},
		Shaping: map[string]queue.Shaping{"api": {Rate: rate, OnLate: queue.LateReject}}})
	defer p.Close()
	ctx := context.Background()
	for range 100 { // no dispatcher: 5 promoted (half a second at 10/s), 95 parked
		if _, err := p.Enqueue(ctx, queue.Task{Downstream: "api", Key: "A", Payload: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	rec, err := p.Enqueue(ctx, queue.Task{Downstream: "api", Key: "A", Payload: []byte("{}"), TTL: 2 * time.Second})
	var le *queue.LateError
	if !errors.As(err, &le) || rec.Outcome != queue.Late || rec.ID != "" {
		t.Fatalf("A's task behind 100 at 10/s with a 2s TTL: %+v, %v; want Outcome Late and a *LateError", rec, err)
	}
	if d := time.Until(le.ExpectedStart); d < 9*time.Second || d > 11*time.Second {
		t.Errorf("expected start in %v, want about 10s (100 tasks ahead at 10/s)", d)
	}
	b, err := queue.NewInspector(rdb, prefix).Backlog("api")
	if err != nil || b.Total() != 100 || b.Pending != 100 {
		t.Errorf("backlog %+v (%v), want the 100 tasks pending (waiting in fair order) and not the refused one", b, err)
	}
	rec, err = p.Enqueue(ctx, queue.Task{Downstream: "api", Key: "B", Payload: []byte("{}"), TTL: 2 * time.Second})
	if err != nil || rec.Outcome != queue.Accepted {
		t.Fatalf("B's lone task: %+v, %v; want Accepted (it starts at once)", rec, err)
	}
	if d := time.Until(rec.ExpectedStart); d > time.Second {
		t.Errorf("B's expected start in %v, want within a second", d)
	}
}

// A downstream that may hold its tasks for long (Shaping.HoldTimeout) gets
// tasks whose attempt outlasts the hold, unless a task sets its own.
func TestHoldTimeout(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix,
		Shaping: map[string]queue.Shaping{"api": {Rate: limiters.PerSecond(10), HoldTimeout: 25 * time.Hour}}})
	defer p.Close()
	ctx := context.Background()
	in := asynq.NewInspectorFromRedisClient(rdb)
	for _, tc := range []struct {
		timeout, want time.Duration
	}{{0, 25 * time.Hour}, {time.Minute, time.Minute}} {
		rec, err := p.Enqueue(ctx, queue.Task{Downstream: "api", Payload: []byte("{}"), Timeout: tc.timeout})
		if err != nil {
			t.Fatal(err)
		}
		info, err := in.GetTaskInfo(rec.Queue, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		if info.Timeout != tc.want {
			t.Errorf("Timeout %v: the task's attempt timeout is %v, want %v", tc.timeout, info.Timeout, tc.want)
		}
	}
}
