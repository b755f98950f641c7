package take

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/shaper-io/shaper/internal/lua"
)

// place gives each id its priority as the producer does (3: left in
// pending).
func (r *rig) place(ds string, ids []string, prio []int) {
	r.t.Helper()
	st := lua.New(r.rdb)
	for i, id := range ids {
		if prio[i] == 3 {
			continue
		}
		if _, err := st.PlacePriority(context.Background(), r.sp.Asynq(ds), r.sp.TakePriority(ds, prio[i]), id, prio[i]); err != nil {
			r.t.Fatal(err)
		}
	}
}

// TestTakeEnginePriority: 20 tasks of mixed priorities, served one at a
// time at 20/s, are called in priority order (1 first, 5 last), first in,
// first out within a priority; a task of priority 1 that fails is retried
// before every task of priority 2 and lower, and one given back
// (ErrRequeue) goes again before them too.
func TestTakeEnginePriority(t *testing.T) {
	r := newRig(t)
	prio := []int{3, 5, 1, 4, 2, 3, 1, 5, 2, 4, 3, 1, 2, 5, 4, 3, 2, 1, 4, 5}
	ids := r.enqueue("d", "job", len(prio), asynq.MaxRetry(3))
	r.place("d", ids, prio)
	level := map[string]int{}
	for i, id := range ids {
		level[id] = prio[i]
	}
	var mu sync.Mutex
	var order []string
	failOnce, requeueOnce := ids[2], ids[6] // both priority 1
	tried := map[string]bool{}
	d := Downstream{Name: "d", Rate: 20, InFlight: 1, Priority: true, LateTolerance: -1,
		RetryDelay: func(int, error, *Task) time.Duration { return 0 },
		Handler: func(ctx context.Context, t *Task) error {
			mu.Lock()
			defer mu.Unlock()
			if (t.ID == failOnce || t.ID == requeueOnce) && !tried[t.ID] {
				tried[t.ID] = true
				if t.ID == requeueOnce {
					return fmt.Errorf("not now: %w", ErrRequeue)
				}
				return errors.New("fails once")
			}
			order = append(order, t.ID)
			return nil
		}}
	start(t, r.engine(nil, Config{Maintain: 10 * time.Millisecond}, d))
	waitFor(t, 10*time.Second, "every task done", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) == len(ids)
	})
	var got []int
	for _, id := range order {
		got = append(got, level[id])
	}
	// the retry waits in the retry set until a maintenance forwards it
	// (every 10ms) to the priority-1 list: three priority-1 tasks (150ms)
	// are still ahead of it, and it goes before any task of priority 2
	if !slices.IsSorted(got) {
		t.Errorf("priorities in call order %v, want 1s, then 2s, ... 5s", got)
	}
	for p := 1; p <= 5; p++ {
		var want, have []string
		for i, id := range ids {
			if prio[i] == p && id != failOnce {
				want = append(want, id)
			}
		}
		for _, id := range order {
			if level[id] == p && id != failOnce {
				have = append(have, id)
			}
		}
		if !slices.Equal(want, have) {
			t.Errorf("priority %d: called %v, want first in, first out %v", p, have, want)
		}
	}
	if qi := r.queueInfo("d"); qi.Pending+qi.Active+qi.Retry != 0 {
		t.Errorf("queue after: %+v, want empty", qi)
	}
	for _, p := range []int{1, 2, 4, 5} {
		if n := r.rdb.LLen(context.Background(), r.sp.TakePriority("d", p)).Val(); n != 0 {
			t.Errorf("priority list %d holds %d, want 0", p, n)
		}
	}
}
