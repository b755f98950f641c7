package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/testsink"
	"github.com/shaper-io/shaper/queue"
)

// Two shaper processes at 50/s with priority, the default workers: 1,000
// tasks of priority 5 wait, releases are under way, then 20 of priority 1
// arrive one after another. The first of them is released within 2
// intervals + 100 ms of its enqueue and all 20 within 20 intervals + 300
// ms, though each process holds waiters of priority 5 (the processes'
// lanes give the slots to the highest priority waiting in any of them:
// shaping.lua's claims); no second has more than rate + 1; what was not
// delivered still waits, none twice.
// The same with fair share on, the backlog over 10 tenants and the 20
// over 3. The producer is the one the config builds (what the enqueue CLI
// and the HTTP API run).
func TestPriorityUnderBacklogTwoProcesses(t *testing.T) {
	t.Run("fifo", func(t *testing.T) { priorityUnderBacklog(t, "") })
	t.Run("fair", func(t *testing.T) { priorityUnderBacklog(t, "    fairness: {key: tenant}\n") })
}

func priorityUnderBacklog(t *testing.T, fairness string) {
	sink := testsink.New()
	defer sink.Close()
	prefix := redistest.Prefix(t)
	cfg := daemonYAML(t, prefix, fmt.Sprintf(`  - name: api
    rate: 50/s
    priority: {}
%s    handler: {type: http, url: %q, timeout: 5s}
`, fairness, sink.URL()))
	p := fairProducer(t, cfg)
	enq := func(tag string, n, prio, tenants int) []time.Time {
		var at []time.Time
		for i := range n {
			b, _ := json.Marshal(tenantTask{tag, i})
			at = append(at, time.Now())
			key := fmt.Sprintf("tenant-%d", i%tenants)
			if _, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Key: key, Payload: b, Priority: prio}); err != nil {
				t.Fatalf("enqueue %s #%d: %v", tag, i, err)
			}
		}
		return at
	}
	const low, high = 1000, 20
	enq("p5", low, 5, 10)
	procs := []*proc{startShaper(t, cfg), startShaper(t, cfg)}
	waitFor(t, 30*time.Second, "50 releases of priority 5", func() bool { return sink.Count() >= 50 })
	urgent := enq("p1", high, 1, 3)
	var r map[string][]time.Time
	waitFor(t, 10*time.Second, "the 20 of priority 1 released", func() bool {
		r, _ = releases(t, sink)
		return len(r["p1"]) == high
	})
	const interval = 20 * time.Millisecond
	first, last := r["p1"][0].Sub(urgent[0]), slices.MaxFunc(r["p1"], time.Time.Compare).Sub(urgent[0])
	t.Logf("priority 1 behind %d of priority 5 at 50/s × 2 processes: first released %v after its enqueue, all %d within %v (bounds %v, %v); the %d enqueued over %v",
		low, first.Round(time.Millisecond), high, last.Round(time.Millisecond), 2*interval+100*time.Millisecond, 20*interval+300*time.Millisecond,
		high, urgent[high-1].Sub(urgent[0]).Round(time.Millisecond))
	var gaps []string
	for _, at := range r["p1"] {
		gaps = append(gaps, at.Sub(urgent[0]).Round(time.Millisecond).String())
	}
	t.Logf("priority 1 releases after the first enqueue: %v", gaps)
	if first > 2*interval+100*time.Millisecond {
		t.Errorf("the first of priority 1 released %v after its enqueue, want within 2 intervals + 100ms", first)
	}
	if last > 20*interval+300*time.Millisecond {
		t.Errorf("the last of priority 1 released %v after the first's enqueue, want within 20 intervals + 300ms", last)
	}
	for _, pr := range procs {
		pr.stop(t)
	}
	r, hits := releases(t, sink)
	var at []time.Time
	for _, h := range hits {
		at = append(at, h.At)
	}
	t.Logf("release rate under the backlog: %.2f/s (%d releases)", float64(len(at)-11)/at[len(at)-1].Sub(at[10]).Seconds(), len(at)-11)
	if m := testsink.MaxInWindow(at, time.Second); m > 51 {
		t.Errorf("%d releases in one second, want at most rate + 1 = 51", m)
	}
	checkNothingLost(t, prefix, low+high, len(hits))
}
