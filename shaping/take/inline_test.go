package take

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestTakeEngineInLine: on a downstream with InLine, the handler of a
// task is called only once the task taken before it in the same take
// said InLine, or returned without saying it. Each handler dawdles
// between its start and its word, the window in which a next handler
// called at once would start.
func TestTakeEngineInLine(t *testing.T) {
	r := newRig(t)
	ids := r.enqueue("d", "job", 12)
	var mu sync.Mutex
	var log []string            // "start <order>", "line <order>"
	takeOf := map[int64]int64{} // a task's order -> its take's last order
	d := Downstream{Name: "d", InFlight: 6, InLine: true, LateTolerance: -1,
		Handler: func(ctx context.Context, t *Task) error {
			mu.Lock()
			log = append(log, fmt.Sprint("start ", t.Order))
			takeOf[t.Order] = t.Order + int64(t.Behind)
			mu.Unlock()
			time.Sleep(5 * time.Millisecond) // a slow path to the handler's queue
			mu.Lock()
			log = append(log, fmt.Sprint("line ", t.Order))
			mu.Unlock()
			if t.Order%2 == 0 {
				return errors.New("left before its place in line") // retried: no word said
			}
			InLine(ctx)
			InLine(ctx) // a second word does nothing
			return nil
		}}
	start(t, r.engine(nil, Config{Maintain: 10 * time.Millisecond}, d))
	waitFor(t, 10*time.Second, "every task handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(log) >= 2*len(ids)
	})
	mu.Lock()
	defer mu.Unlock()
	lined := map[int64]bool{}
	multi := 0
	for _, e := range log {
		var what string
		var o int64
		if _, err := fmt.Sscan(e, &what, &o); err != nil {
			t.Fatal(err)
		}
		if what == "line" {
			lined[o] = true
			continue
		}
		if prev := o - 1; takeOf[prev] == takeOf[o] {
			multi++
			if !lined[prev] {
				t.Errorf("task %d started before %d, taken before it in its take, was in line: %v", o, prev, log)
			}
		}
	}
	if multi == 0 {
		t.Fatalf("no take of more than one task: %v", log)
	}
}
