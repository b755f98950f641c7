package shaping_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// A downstream with Priority at 20/s: a backlog of mixed priorities from
// the producer is released in priority order, first in, first out within
// each; while paused, tasks of priority 5 and 3 come, then one of
// priority 1: after the resume it goes first, then the 3s; the backlog
// counts the tasks on the
// priority lists as pending, Cancel deletes one there, and a producer
// refuses a priority for a downstream that serves none.
func TestPriorityOrderUnderRate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rdb, prefix, d := e.rdb, e.prefix, e.d
	var rel released
	// the default workers: a take brings several tasks, and they queue at
	// the lane in the take's order (take.InLine), so a task of priority 1
	// is not passed by one of priority 2 taken with it
	must(t, d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(20), Priority: &shaping.Priority{},
		Handler: rel.handle}))
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix, Priority: map[string]int{"api": 0}})
	defer p.Close()
	enq := func(name string, prio int) string {
		t.Helper()
		rc, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Payload: []byte(name), Priority: prio})
		must(t, err)
		want := prio
		if want == 0 {
			want = 3
		}
		if rc.Priority != want {
			t.Errorf("%s: receipt priority %d, want %d", name, rc.Priority, want)
		}
		return rc.ID
	}
	prios := []int{5, 3, 0, 1, 4, 2, 5, 1, 3, 2, 4, 0}
	for i, pr := range prios {
		enq(taskName(i, pr), pr)
	}
	cancelled := enq("cancelled-p2", 2)
	in := queue.NewInspector(rdb, prefix)
	b, err := in.Backlog("api")
	must(t, err)
	if b.Pending != len(prios)+1 {
		t.Errorf("backlog pending %d, want %d (the priority lists count)", b.Pending, len(prios)+1)
	}
	if st, err := in.Cancel("api", cancelled); err != nil || st.String() != "pending" {
		t.Errorf("cancel of a task on a priority list: %v, %v; want pending, nil", st, err)
	}
	must(t, d.Start())
	if got, want := rel.await(t, "the backlog released", len(prios)), byPriority(prios); !slices.Equal(got, want) {
		t.Errorf("released %v, want %v", got, want)
	}

	// a pause with work of priorities 3 and 5 waiting; a 1 comes meanwhile
	ctl := shaping.NewControl(rdb, prefix)
	must(t, ctl.Pause(context.Background(), "api"))
	// the dispatcher sees the pause at its next control tick: tasks
	// enqueued before that are taken at once, in the order they come
	waitFor(t, 5*time.Second, "the dispatcher paused", func() bool { p, err := d.Paused("api"); return err == nil && p })
	for i := range 5 {
		enq(fmt.Sprintf("late-p5-%d", i), 5)
		enq(fmt.Sprintf("late-p3-%d", i), 3)
	}
	enq("urgent-p1", 1)
	must(t, ctl.Resume(context.Background(), "api"))
	got := rel.await(t, "the second backlog released", 11)
	if got[0] != "urgent-p1" {
		t.Errorf("after the resume: %v, want urgent-p1 first", got)
	}
	for i, name := range got[1:6] {
		if name != fmt.Sprintf("late-p3-%d", i) {
			t.Errorf("after the resume: %v, want the 3s in order before the 5s", got)
			break
		}
	}

	plain := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix})
	defer plain.Close()
	if _, err := plain.Enqueue(context.Background(), queue.Task{Downstream: "api", Priority: 1}); !errors.Is(err, queue.ErrInvalidTask) {
		t.Errorf("priority 1 without ProducerConfig.Priority: %v, want ErrInvalidTask", err)
	}
	if _, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Priority: 6}); !errors.Is(err, queue.ErrInvalidTask) {
		t.Errorf("priority 6: %v, want ErrInvalidTask", err)
	}
}

// Under a concurrency cap per key the order holds too: a take's tasks
// queue for their leases in take order (take.InLine at the lease lane),
// and tasks granted leases together queue for their slots in the order
// they were granted (leaseTurn), so none of a lower priority races past
// one of a higher to a stocked slot.
func TestPriorityOrderUnderLeases(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var rel released
	must(t, e.d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(20), Priority: &shaping.Priority{},
		KeyConcurrency: 1, Handler: rel.handle}))
	p := queue.NewProducer(e.rdb, queue.ProducerConfig{Prefix: e.prefix, Priority: map[string]int{"api": 0}})
	defer p.Close()
	prios := []int{5, 3, 1, 4, 2, 5, 1, 3, 2, 4}
	for i, pr := range prios {
		_, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Key: fmt.Sprint("k", i),
			Payload: []byte(taskName(i, pr)), Priority: pr})
		must(t, err)
	}
	must(t, e.d.Start())
	if got, want := rel.await(t, "the backlog released", len(prios)), byPriority(prios); !slices.Equal(got, want) {
		t.Errorf("released %v, want %v", got, want)
	}
}

// released records the payloads a handler gets, in call order.
type released struct {
	mu    sync.Mutex
	names []string
}

func (r *released) handle(ctx context.Context, task *shaping.Task) error {
	r.mu.Lock()
	r.names = append(r.names, string(task.Payload))
	r.mu.Unlock()
	return nil
}

// await waits for n releases and returns them all, then forgets them.
func (r *released) await(t *testing.T, what string, n int) []string {
	t.Helper()
	waitFor(t, 10*time.Second, what, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.names) >= n
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.names
	r.names = nil
	return got
}

// byPriority names the tasks of prios ("t00-p5", ...) in the order strict
// priority releases them: by priority, then as enqueued; a task that
// names none (0) goes at 3.
func byPriority(prios []int) []string {
	var want []string
	for lv := 1; lv <= 5; lv++ {
		for i, pr := range prios {
			if pr == lv || pr == 0 && lv == 3 {
				want = append(want, taskName(i, pr))
			}
		}
	}
	return want
}

func taskName(i, pr int) string {
	if pr == 0 {
		pr = 3
	}
	return fmt.Sprintf("t%02d-p%d", i, pr)
}
