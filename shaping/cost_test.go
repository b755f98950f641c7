package shaping_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/testsink"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// The HTTP handler is shaped by each task's cost, not by request count:
// at 100 units/s, tasks of cost 10 (say, an API that charges per item)
// get slots 100ms apart and reach the API at 10 requests/s.
func TestHTTPShapedByCost(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	sink := testsink.New()
	defer sink.Close()
	d := shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	must(t, d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(100), Workers: 8, MaxWait: time.Second,
		Handler: shaping.HTTPHandler(shaping.HTTPConfig{URL: sink.URL()})}))
	defer d.Shutdown(context.Background())
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix})
	defer p.Close()
	const n, cost = 20, 10
	for i := range n {
		_, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Cost: cost, Payload: fmt.Appendf(nil, `{"items":%d}`, i)})
		must(t, err)
	}
	must(t, d.Start())
	waitFor(t, 20*time.Second, "20 requests", func() bool { return sink.Count() >= n })

	hits := sink.OK()
	slots := make([]time.Time, 0, len(hits))
	for _, h := range hits {
		slots = append(slots, h.Slot)
	}
	slices.SortFunc(slots, func(a, b time.Time) int { return a.Compare(b) })
	interval := 100 * time.Millisecond // cost / rate
	var exact int
	for i := 1; i < len(slots); i++ {
		gap := slots[i].Sub(slots[i-1])
		if gap < interval-time.Microsecond {
			t.Errorf("slots %d and %d are %v apart, want >= %v (cost %d at 100/s)", i-1, i, gap, interval, cost)
		}
		if gap < interval+time.Millisecond {
			exact++
		}
	}
	if exact < (n-1)/2 {
		t.Errorf("%d of %d slot gaps are %v, want most (a backlog is released back to back)", exact, n-1, interval)
	}
	if m := testsink.MaxInWindow(testsink.Times(hits), time.Second); m > 100/cost+1 {
		t.Errorf("%d requests within 1s, want <= 100/s / cost %d + 1 = %d", m, cost, 100/cost+1)
	}
}
