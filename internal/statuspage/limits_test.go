package statuspage_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/statuspage"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// The page shows each quota's use and reset, the limit the answers
// announced and the pace it imposed, and the settled cost.
func TestStatusShowsQuotasAndAnnouncedLimits(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: "downstreams:\n  - {name: api, rate: 100/s, quotas: [{limit: 6, per: 1m}], handler: {type: log}}\n",
		handler: func(_ context.Context, tk *shaping.Task) error {
			tk.ReportHeader(http.Header{"X-Ratelimit-Limit": {"10000"}, "X-Ratelimit-Remaining": {"3000"}, "X-Ratelimit-Reset": {"60"}})
			tk.ReportCost(2)
			return nil
		}})
	b.start(t)
	for range 10 { // more than the quota takes: the rest wait
		if _, err := b.p.Enqueue(context.Background(), queue.Task{Downstream: "api"}); err != nil {
			t.Fatal(err)
		}
	}
	// the backlog gauge, which cmd/shaper keeps fresh from the Inspector
	b.m.Backlog.WithLabelValues("api", "pending").Set(4)
	var s statuspage.Snapshot
	k := func(f string) string { return s.View.Cells[statuspage.DownstreamKey("api", f)] }
	defer func() {
		if t.Failed() {
			t.Logf("cells: state %q, quotas %q, announced %q, settled %q", k("state"), k("quotas"), k("announced"), k("settled"))
		}
	}()
	// The quota is spent as the sixth task is released; its handler's
	// header and cost are recorded after that, so wait for those too
	// (the checks below say what each must read).
	waitFor(t, 10*time.Second, "the quota spent, the answers' limit and cost recorded, and the page showing them", func() bool {
		s = b.snapshot(t)
		return strings.HasPrefix(k("quotas"), "6 per minute (sliding) · 6 used · use falls in ") && k("state") == "held by quota" &&
			k("announced") != "none" && k("settled") != "none"
	})
	if got := k("why_kind") + ": " + k("why"); !strings.HasPrefix(got, "quota: 6 per minute (sliding) · 6 used · use falls in ") {
		t.Errorf("why-waiting line %q, want the quota in words", got)
	}
	if got := k("announced"); !strings.Contains(got, "x-ratelimit: 3000 of 10000 left") || !strings.Contains(got, "resets in") {
		t.Errorf("announced cell %q, want the x-ratelimit limit of 3 of 10 and its reset", got)
	}
	if got := k("settled"); !strings.HasPrefix(got, "+") || strings.HasPrefix(got, "+0 ") {
		t.Errorf("settled cell %q, want units charged (cost 1 reported as 2)", got)
	}
	d := ds(s, "api")
	if len(d.Quotas) != 1 || d.Quotas[0].Limit != 6 || d.Quotas[0].ResetInSeconds == nil || d.Announced == nil || d.SettledChargedTotal < 1 {
		t.Errorf("JSON: quotas %+v, announced %+v, charged %v", d.Quotas, d.Announced, d.SettledChargedTotal)
	}
}

func TestHumanDurations(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		s    float64
		want string
	}{{0, "0 s"}, {45.4, "45 s"}, {200, "3 m 20 s"}, {61330, "17 h 02 m"}, {2*86400 + 4*3600, "2 d 04 h"}} {
		if got := statuspage.Secs(c.s); got != c.want {
			t.Errorf("secs(%v) = %q, want %q", c.s, got, c.want)
		}
	}
}
