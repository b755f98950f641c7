package statuspage_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/statuspage"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
)

// Shadow outcomes show beside the real ones: a limiter in shadow with its
// would-be rejections, a shaping in shadow with its would-be waits; a
// runtime switch shows on the page.
func TestStatusShowsShadowOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: `
downstreams:
  - name: api
    rate: 5/s
    shaping_mode: shadow
    handler: {type: log}
    admission:
      limiters:
        - {name: tb, rate: 1/m, burst: 3, mode: shadow}
`})
	b.start(t)
	for range 10 {
		if rec, err := b.p.Enqueue(context.Background(), queue.Task{Downstream: "api", Key: "k"}); err != nil || rec.Outcome != queue.Accepted {
			t.Fatalf("enqueue: %s, %v; want accepted (the limiter is in shadow)", rec.Outcome, err)
		}
	}
	var s statuspage.Snapshot
	waitFor(t, 10*time.Second, "ten releases and their shadow waits on the page", func() bool {
		s = b.snapshot(t)
		return ds(s, "api").ShadowWait.Count == 10
	})
	api := ds(s, "api")
	if api.ShapingMode != "shadow" || s.View.Cells[statuspage.DownstreamKey("api", "state")] != "shadow" {
		t.Errorf("shaping mode %q, state %q; want shadow", api.ShapingMode, s.View.Cells[statuspage.DownstreamKey("api", "state")])
	}
	// Ten tasks at once at 5/s: waits 0 … 1.8s.
	if p99 := api.ShadowWait.P99Seconds; p99 == nil || *p99 < 1 || *p99 > 2.5 {
		t.Errorf("shadow wait p99 = %v, want about 1.8s", deref(p99))
	}
	l, ok := lim(s, "api", "tb")
	if !ok || l.Mode != "shadow" || l.Shadow["rejected"] != 7 || l.Shadow["allowed"] != 3 || l.Decisions["rejected"] != 0 {
		t.Errorf("limiter %+v, want mode shadow, 3 allowed and 7 would-reject in shadow, no real rejection", l)
	}
	if c := s.View.Cells[statuspage.LimiterKey("api", "tb", "shadow")]; !strings.Contains(c, "would reject 7") {
		t.Errorf("shadow cell %q, want it to say would reject 7", c)
	}
	if err := b.d.Control().SetMode(context.Background(), "api", "tb", limiters.Enforce); err != nil {
		t.Fatal(err)
	}
	if err := b.d.Control().SetMode(context.Background(), "api", "", limiters.Enforce); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "enforce on the page", func() bool {
		s = b.snapshot(t)
		l, _ := lim(s, "api", "tb")
		return l.Mode == "enforce" && ds(s, "api").ShapingMode == "enforce"
	})
	html, _ := get(t, b.url+"/status")
	for _, want := range []string{"shaping mode", "would have waited", "in shadow", "would reject 7"} {
		if !strings.Contains(html, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}
