package shaping_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// A downstream that refuses every call (a bare 429, or one with a
// Retry-After) gets few calls: the slots reserved before a pushback are
// given up, not sent after it, and bare refusals in a row back off
// (1 s, 2 s, 4 s, ...). Counted over a fixed span at 10/s with a backlog.
func TestRefusalsInARowGetFewCalls(t *testing.T) {
	t.Parallel()
	redistest.TimingOnly(t, "TestPushBackPausesEveryWorker (a pushback shared through Redis)")
	for _, c := range []struct {
		name       string
		retryAfter string
		span       time.Duration
		most       int
	}{
		// backoff 1+2+4 s covers 7 s: the first call, then one after
		// each pause, and a slot a worker was already sleeping on
		{"bare 429", "", 6 * time.Second, 5},
		// one call per 2 s pause, plus the first
		{"Retry-After 2", "2", 6 * time.Second, 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			api := newStandIn(func(_ time.Time, _ []time.Time, h http.Header) int {
				if c.retryAfter != "" {
					h.Set("Retry-After", c.retryAfter)
				}
				return http.StatusTooManyRequests
			})
			defer api.Close()
			rdb := redistest.Client(t)
			prefix := redistest.Prefix(t)
			d := shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			must(t, d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(10),
				Handler: shaping.HTTPHandler(shaping.HTTPConfig{URL: api.URL(), Timeout: 5 * time.Second})}))
			defer d.Shutdown(context.Background())
			must(t, d.Start())
			p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix})
			defer p.Close()
			for i := range 50 {
				_, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Payload: fmt.Appendf(nil, "%d", i)})
				must(t, err)
			}
			waitFor(t, 10*time.Second, "the first refusal", func() bool { _, r := api.counts(); return r >= 1 })
			_, refused, _ := api.snapshot()
			first := refused[0]
			<-time.After(time.Until(first.Add(c.span))) // the span counted
			_, refused, _ = api.snapshot()
			n := 0
			for _, r := range refused {
				if r.Sub(first) < c.span {
					n++
				}
			}
			t.Logf("%d calls in %s", n, c.span)
			if n > c.most {
				t.Errorf("%d calls in %s of refusals at 10/s, want at most %d", n, c.span, c.most)
			}
		})
	}
}
