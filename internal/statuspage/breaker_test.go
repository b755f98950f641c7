package statuspage_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/statuspage"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// A downstream that answers 500: the page shows its breaker open, with
// the cool-down left, the transition this process made and the
// thresholds; the state badge says so; a downstream without a breaker
// shows "off". The server-rendered HTML carries the same cells.
func TestStatusShowsTheBreaker(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{
		yaml: "downstreams:\n  - {name: api, rate: 20/s, handler: {type: log}, breaker: {window: 2s, min_calls: 5, cooldown: 1m}}\n" +
			"  - {name: db, rate: 10/s, handler: {type: log}}\n",
		handler: func(ctx context.Context, tk *shaping.Task) error {
			if tk.Downstream == "api" {
				return &shaping.StatusError{Code: 500}
			}
			return nil
		}})
	b.start(t)
	for range 10 {
		if _, err := b.p.Enqueue(context.Background(), queue.Task{Downstream: "api"}); err != nil {
			t.Fatal(err)
		}
	}
	var s statuspage.Snapshot
	// the state comes from Redis, the transition count from this
	// process's metrics a moment later: wait for both
	waitFor(t, 10*time.Second, "the breaker open on the page, with its transition", func() bool {
		s = b.snapshot(t)
		br := ds(s, "api").Breaker
		return br != nil && br.State == "open" && br.Transitions["open"] > 0
	})
	br := ds(s, "api").Breaker
	if br.Since == nil || br.OpenUntil == nil || br.OpenUntil.Sub(*br.Since) != time.Minute {
		t.Errorf("since %v, open until %v: want a 1m cool-down", br.Since, br.OpenUntil)
	}
	if br.Transitions["open"] != 1 {
		t.Errorf("transitions %v, want open 1", br.Transitions)
	}
	if want := "opens at 0.5 of ≥5 calls in 2s; open 1m doubling to 2m; closes after 3 probes at 1/s"; br.Settings != want {
		t.Errorf("settings %q, want %q", br.Settings, want)
	}
	cell := func(ds, f string) string { return s.View.Cells[statuspage.DownstreamKey(ds, f)] }
	if got := cell("api", "state"); got != "breaker open" {
		t.Errorf("state cell %q, want \"breaker open\"", got)
	}
	if got := cell("api", "breaker"); !strings.HasPrefix(got, "open (") || !strings.HasSuffix(got, " s left)") {
		t.Errorf("breaker cell %q, want \"open (… s left)\"", got)
	}
	if got := cell("api", "breaker_moves"); got != "to open 1" {
		t.Errorf("breaker transitions cell %q, want \"to open 1\"", got)
	}
	if got := cell("db", "breaker"); got != "off" || ds(s, "db").Breaker != nil {
		t.Errorf("a downstream without a breaker: cell %q, info %+v; want \"off\", none", got, ds(s, "db").Breaker)
	}
	page, _ := get(t, b.url+"/status")
	for _, want := range []string{`data-k="ds/api/breaker"`, `data-k="ds/api/breaker_moves">to open 1<`, `data-state="breaker open"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the HTML lacks %s", want)
		}
	}
}
