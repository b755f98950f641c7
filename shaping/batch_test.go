package shaping_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/testsink"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// Batches cost their row count: a rate of 100 rows/s in batches of <= 20.
func TestBatchesAreShapedByRows(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	d := shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	var mu sync.Mutex
	var commits []time.Time
	var sizes []int
	seen := map[string]int{}
	ids := map[string]bool{}
	must(t, d.Add(shaping.Downstream{Name: "db", Rate: limiters.PerSecond(100), Workers: 4, MaxWait: 2 * time.Second,
		Batch: &shaping.Batch{MaxRows: 20, MaxDelay: time.Second},
		Handler: func(ctx context.Context, task *shaping.Task) error {
			rows, err := shaping.DecodeBatch(task.Payload)
			if err != nil {
				return shaping.Permanent(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if task.Type != shaping.BatchType || task.Cost != int64(len(rows)) {
				t.Errorf("batch type %q cost %d with %d rows", task.Type, task.Cost, len(rows))
			}
			for _, r := range rows {
				var v struct{ N int }
				json.Unmarshal(r.Payload, &v)
				seen[fmt.Sprint(v.N)]++
				if r.ID == "" || ids[r.ID] {
					t.Errorf("row id %q missing or repeated", r.ID)
				}
				ids[r.ID] = true
			}
			for range rows {
				commits = append(commits, time.Now())
			}
			sizes = append(sizes, len(rows))
			return nil
		}}))
	defer d.Shutdown(context.Background())
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix, Batched: map[string]int{"db": shaping.BatchGroups(100, 20)}})
	for i := 0; i < 200; i++ {
		_, err := p.Enqueue(context.Background(), queue.Task{Downstream: "db", Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))})
		must(t, err)
	}
	must(t, d.Start())
	waitFor(t, 30*time.Second, "200 rows committed", func() bool { mu.Lock(); defer mu.Unlock(); return len(commits) >= 200 })
	mu.Lock()
	defer mu.Unlock()
	for i := 0; i < 200; i++ {
		if seen[fmt.Sprint(i)] != 1 {
			t.Errorf("row %d committed %d times, want 1", i, seen[fmt.Sprint(i)])
		}
	}
	for _, s := range sizes {
		if s > 20 {
			t.Errorf("a batch of %d rows, want <= 20", s)
		}
	}
	if m := testsink.MaxInWindow(commits, time.Second); m > 100+20 {
		t.Errorf("%d rows committed in a 1s window, want <= rate + one batch = 120", m)
	}
	t.Logf("batches: %v", sizes)
}
