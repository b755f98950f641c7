package app_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"testing"

	"github.com/shaper-io/shaper/internal/app"
	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
)

// A cost must not lift or freeze a downstream's rate: the producer built
// from the config refuses a cost above what the bucket holds (rate ×
// max_wait), unless max_cost allows more; `shaper ctl reset` clears a
// bucket.
func TestConfigProducerBoundsCost(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	cfg, err := config.Parse([]byte(`
redis: {url: "` + redistest.URL(t) + `", prefix: "` + prefix + `"}
downstreams:
  - {name: other, rate: 5/s, handler: {type: http, url: "http://127.0.0.1:9/x"}}
  - {name: big, rate: 5/s, max_cost: 1000, handler: {type: http, url: "http://127.0.0.1:9/x"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redistest.Client(t)
	p, err := app.NewProducer(rdb, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	for i, step := range []struct {
		ds   string
		cost int64
		ok   bool
	}{
		{"other", 5, true}, {"other", 6, false}, {"other", 40000000000, false}, {"other", math.MaxInt64, false},
		{"big", 1000, true}, {"big", 1001, false},
	} {
		_, err := p.Enqueue(ctx, queue.Task{Downstream: step.ds, Cost: step.cost})
		if got := err == nil; got != step.ok || (!step.ok && !errors.Is(err, limiters.ErrCostExceedsCapacity)) {
			t.Errorf("step %d: %s cost %d: err %v, want ok=%v (else ErrCostExceedsCapacity)", i, step.ds, step.cost, err, step.ok)
		}
	}
}

func TestConfigRejectsMaxCostPastADay(t *testing.T) {
	t.Parallel()
	_, err := config.Parse([]byte(`
redis: {url: "redis://127.0.0.1:1/0"}
downstreams:
  - {name: other, rate: 5/s, max_cost: 1000000, handler: {type: http, url: "http://127.0.0.1:9/x"}}
`))
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("max_cost: 1000000")) {
		t.Errorf("max_cost 1000000 at 5/s (55 h): err %v, want one naming max_cost and the value", err)
	}
}
