package queue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/redistest"
	shtest "github.com/shaper-io/shaper/internal/testutil"
	"github.com/shaper-io/shaper/queue"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// collapsedCounter is the collapsed_tasks_total series of downstream ds.
func collapsedCounter(t *testing.T, reg *prometheus.Registry, ds string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	must(t, err)
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
	for _, mf := range mfs {
		if mf.GetName() != "shaper_queue_collapsed_tasks_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "downstream" && l.GetValue() == ds {
					c.Add(m.GetCounter().GetValue())
				}
			}
		}
	}
	return c
}

// Ten "sync tenant 7" updates behind a limit reach the downstream as one
// task: keep_last gives the waiting task the newest payload and keeps its
// id; keep_first drops the newcomers; another key, or no key, is never
// collapsed; a task already taken is not touched (the next one waits
// behind it); a task waiting longer than the window collapses nothing.
func TestCollapse(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	reg := prometheus.NewRegistry()
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix, Registerer: reg, Collapse: map[string]queue.Collapse{
		"last": {Mode: queue.KeepLast}, "first": {Mode: queue.KeepFirst}, "short": {Mode: queue.KeepLast, Window: 100 * time.Millisecond}}})
	defer p.Close()
	in := asynq.NewInspectorFromRedisClient(rdb)
	ctx := context.Background()
	enq := func(ds, key, payload string) queue.Receipt {
		t.Helper()
		rc, err := p.Enqueue(ctx, queue.Task{Downstream: ds, CollapseKey: key, Payload: []byte(payload)})
		if err != nil {
			t.Fatalf("enqueue %s %s: %v", ds, payload, err)
		}
		return rc
	}
	first := enq("last", "tenant-7", "v0")
	for i := 1; i < 10; i++ {
		rc := enq("last", "tenant-7", "v"+string(rune('0'+i)))
		if rc.Outcome != queue.Collapsed || rc.CollapsedInto != first.ID || rc.ID != first.ID {
			t.Fatalf("update %d: %v into %q, want collapsed into %s", i, rc.Outcome, rc.CollapsedInto, first.ID)
		}
	}
	other := enq("last", "tenant-8", "x")
	plain := enq("last", "", "y")
	if other.Outcome != queue.Accepted || plain.Outcome != queue.Accepted {
		t.Errorf("another key: %v, no key: %v; want both accepted", other.Outcome, plain.Outcome)
	}
	qi, err := in.GetQueueInfo(prefix + ":last")
	must(t, err)
	if qi.Pending != 3 {
		t.Errorf("%d pending, want 3 (the ten updates as one, and two others)", qi.Pending)
	}
	info, err := in.GetTaskInfo(prefix+":last", first.ID)
	must(t, err)
	if string(info.Payload) != "v9" || info.State != asynq.TaskStatePending {
		t.Errorf("collapsed task: payload %q state %v, want the last payload v9, pending", info.Payload, info.State)
	}

	kf := enq("first", "k", "a")
	if rc := enq("first", "k", "b"); rc.Outcome != queue.Collapsed || rc.CollapsedInto != kf.ID {
		t.Errorf("keep_first: %v into %q, want collapsed into %s", rc.Outcome, rc.CollapsedInto, kf.ID)
	}
	if info, _ := in.GetTaskInfo(prefix+":first", kf.ID); string(info.Payload) != "a" {
		t.Errorf("keep_first: payload %q, want the first one kept", info.Payload)
	}

	// taken (active): never touched, the newcomer waits behind it
	if err := rdb.LMove(ctx, "asynq:{"+prefix+":first}:pending", "asynq:{"+prefix+":first}:active", "RIGHT", "LEFT").Err(); err != nil {
		t.Fatal(err)
	}
	must(t, rdb.HSet(ctx, "asynq:{"+prefix+":first}:t:"+kf.ID, "state", "active").Err())
	if rc := enq("first", "k", "c"); rc.Outcome != queue.Accepted || rc.ID == kf.ID {
		t.Errorf("behind a taken task: %v %s, want a new task accepted", rc.Outcome, rc.ID)
	}

	s := enq("short", "k", "a")
	shtest.WaitFor(t, 2*time.Second, "the window to pass", func() bool {
		return rdb.Exists(ctx, keys.New(prefix).Collapse("short", "k")).Val() == 0
	})
	if rc := enq("short", "k", "b"); rc.Outcome != queue.Accepted || rc.ID == s.ID {
		t.Errorf("after the window: %v, want a new task accepted", rc.Outcome)
	}
	if n := testutil.ToFloat64(collapsedCounter(t, reg, "last")); n != 9 {
		t.Errorf("collapsed_tasks_total{downstream=last} = %v, want 9", n)
	}
	if _, err := p.Enqueue(ctx, queue.Task{Downstream: "last", CollapseKey: string(make([]byte, 1025))}); !errors.Is(err, queue.ErrInvalidTask) {
		t.Errorf("a 1025-byte collapse key: %v, want ErrInvalidTask", err)
	}
}
