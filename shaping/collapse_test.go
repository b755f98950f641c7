package shaping_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// Ten updates of one tenant enqueued while the downstream is paused reach
// it as one call, with the last payload; an update enqueued while that
// call runs is not collapsed into it (a task taken is never touched) and
// is delivered after it.
func TestCollapseRedundantCalls(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rdb, prefix, d := e.rdb, e.prefix, e.d
	var mu sync.Mutex
	var calls []string
	inCall, release := make(chan struct{}, 1), make(chan struct{})
	must(t, d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(10), Handler: func(ctx context.Context, task *shaping.Task) error {
		mu.Lock()
		calls = append(calls, string(task.Payload))
		first := len(calls) == 1
		mu.Unlock()
		if first {
			inCall <- struct{}{}
			<-release
		}
		return nil
	}}))
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix, Collapse: map[string]queue.Collapse{"api": {Mode: queue.KeepLast}}})
	defer p.Close()
	ctl := shaping.NewControl(rdb, prefix)
	must(t, ctl.Pause(context.Background(), "api"))
	must(t, d.Start())
	var first string
	for i := range 10 {
		rc, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", CollapseKey: "tenant-7", Payload: []byte(fmt.Sprintf("sync %d", i))})
		must(t, err)
		if i == 0 {
			first = rc.ID
		} else if rc.Outcome != queue.Collapsed || rc.CollapsedInto != first {
			t.Fatalf("update %d: %v into %q, want collapsed into %s", i, rc.Outcome, rc.CollapsedInto, first)
		}
	}
	must(t, ctl.Resume(context.Background(), "api"))
	<-inCall
	rc, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", CollapseKey: "tenant-7", Payload: []byte("sync 10")})
	must(t, err)
	if rc.Outcome != queue.Accepted || rc.ID == first {
		t.Errorf("an update while the call runs: %v (%s), want a new task accepted", rc.Outcome, rc.ID)
	}
	close(release)
	waitFor(t, 5*time.Second, "two calls", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(calls) == 2
	})
	mu.Lock()
	defer mu.Unlock()
	if calls[0] != "sync 9" || calls[1] != "sync 10" {
		t.Errorf("calls %q, want [sync 9, sync 10]: the ten updates as one with the last payload, then the one that came during the call", calls)
	}
}
