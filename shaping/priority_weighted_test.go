package shaping_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/priority"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// A downstream with weighted priority (8:2:1 on levels 1, 3 and 5) at
// 100/s releases a backlog of 40, 10 and 5 so that every level gets its
// share while level 1 still waits: in each run of 11 releases, 8±1 of
// priority 1, 2±1 of priority 3 and 1±1 of 5. The release path keeps the
// take's order (it does not sort its look-ahead by priority, as it does
// under strict priority).
func TestPriorityWeightedUnderRate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w, err := priority.WeightsFrom(map[int]int{1: 8, 3: 2, 5: 1})
	must(t, err)
	var mu sync.Mutex
	var order []int
	must(t, e.d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(100), Priority: &shaping.Priority{Weights: w},
		Handler: func(ctx context.Context, task *shaping.Task) error {
			var p int
			if _, err := fmt.Sscan(string(task.Payload), &p); err != nil {
				return err
			}
			mu.Lock()
			order = append(order, p)
			mu.Unlock()
			return nil
		}}))
	p := queue.NewProducer(e.rdb, queue.ProducerConfig{Prefix: e.prefix, Priority: map[string]int{"api": 0}})
	defer p.Close()
	for _, lv := range []struct{ p, n int }{{5, 5}, {3, 10}, {1, 40}} {
		for range lv.n {
			_, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Payload: []byte(fmt.Sprint(lv.p)), Priority: lv.p})
			must(t, err)
		}
	}
	must(t, e.d.Start())
	waitFor(t, 10*time.Second, "the backlog released", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) >= 55
	})
	mu.Lock()
	defer mu.Unlock()
	for k := 11; k <= 44; k += 11 {
		c := map[int]int{}
		for _, p := range order[k-11 : k] {
			c[p]++
		}
		if c[1] < 7 || c[1] > 9 || c[3] < 1 || c[3] > 3 || c[5] > 2 {
			t.Errorf("releases %d-%d: %v, want 8±1 of priority 1, 2±1 of 3, 1±1 of 5", k-10, k, c)
		}
	}
}
