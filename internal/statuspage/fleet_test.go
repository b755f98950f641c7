package statuspage_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/statuspage"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/shaping"
)

// Two processes sharing a Redis: each page shows both, with what each
// releases and holds, and a process that stops publishing leaves the
// fleet.
func TestFleetShowsEveryProcess(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	var pages []*statuspage.Page
	for _, id := range []string{"host-a:1", "host-b:2"} {
		reg := prometheus.NewRegistry()
		d := shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: quiet, Registerer: reg})
		if err := d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(10),
			Handler: func(context.Context, *shaping.Task) error { return nil }}); err != nil {
			t.Fatal(err)
		}
		fl := statuspage.NewFleet(rdb, prefix, "127.0.0.1:0")
		statuspage.SetFleetID(fl, id)
		pages = append(pages, statuspage.New(statuspage.Options{Gatherer: reg, Dispatcher: d, Fleet: fl}))
	}
	for _, p := range pages {
		statuspage.ReadFleet(p, ctx)
	}
	statuspage.ReadFleet(pages[0], ctx) // sees b's summary published after its own
	s := pages[0].Snapshot()
	if len(s.Fleet) != 2 || s.Self != "host-a:1" {
		t.Fatalf("fleet %+v (self %q), want both processes", s.Fleet, s.Self)
	}
	if got := s.View.Cells["fleet"]; !strings.Contains(got, "fleet of 2 processes") {
		t.Errorf("header cell %q, want the fleet of 2", got)
	}
	got := s.View.Cells[statuspage.DownstreamKey("api", "fleet")]
	if !strings.Contains(got, "together") || !strings.Contains(got, "host-a:1") || !strings.Contains(got, "host-b:2") {
		t.Errorf("fleet cell %q, want the sum and both processes", got)
	}
	// the list of processes: this one first and marked, then the other
	rows := s.View.Processes
	if len(rows) != 2 || rows[0].ID != "host-a:1" || !rows[0].Self || rows[1].ID != "host-b:2" || rows[1].Self {
		t.Errorf("processes %+v, want host-a:1 (self) then host-b:2", rows)
	} else if !strings.Contains(rows[1].Text, "seen ") || !strings.Contains(rows[1].Text, "api 0.00/s") {
		t.Errorf("host-b:2's line %q, want when it was seen and its api rate", rows[1].Text)
	}
	if f := s.Downstreams[0].Fleet; f == nil || f.Processes != 2 {
		t.Errorf("api's fleet figures %+v, want 2 processes", f)
	}
	if w := s.View.Cells["warning"]; w != "" {
		t.Errorf("warning %q with both processes on one protocol, want none", w)
	}
	// b as a build before protocols were said: the page warns
	raw := rdb.HGet(ctx, keys.New(prefix).Fleet(), "host-b:2").Val()
	rdb.HSet(ctx, keys.New(prefix).Fleet(), "host-b:2", strings.Replace(raw, `"protocol":`, `"was":`, 1))
	statuspage.ReadFleet(pages[0], ctx)
	if w := pages[0].Snapshot().View.Cells["warning"]; !strings.Contains(w, "1 on protocol 1, 1 on protocol 2") {
		t.Errorf("warning %q with b on an earlier build, want the processes by protocol", w)
	}
	// b's entry goes stale: a's page drops it (its field is deleted)
	stale := strings.Replace(raw, `"at":"`, `"at":"2000-01-01T00:00:00Z","was":"`, 1)
	rdb.HSet(ctx, keys.New(prefix).Fleet(), "host-b:2", stale)
	statuspage.ReadFleet(pages[0], ctx)
	if s := pages[0].Snapshot(); len(s.Fleet) != 1 || len(s.View.Processes) != 1 {
		t.Errorf("fleet after b went stale: %d processes (%d listed), want 1", len(s.Fleet), len(s.View.Processes))
	}
}
