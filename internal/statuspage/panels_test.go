package statuspage_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/app"
	"github.com/shaper-io/shaper/internal/statuspage"
	itestutil "github.com/shaper-io/shaper/internal/testutil"
	"github.com/shaper-io/shaper/queue"
)

// The quick start's page, where a newcomer looks first: the backlog cells
// carry numbers (the quick start keeps the backlog gauge fresh), the
// admission row names the demo limiter's algorithm, key and rate, and the
// count of reservations that found the bucket full reads as waiting for a
// slot, explained, not as an error.
func TestQuickStartPageIsFilledIn(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	var out itestutil.SyncBuffer
	done := make(chan error, 1)
	go func() { done <- app.QuickStart(ctx, &out, app.QuickStartOptions{Listen: "127.0.0.1:0"}) }()
	t.Cleanup(func() { cancel(); <-done })
	addrRE := regexp.MustCompile(`status page: (http://\S+)/ `)
	var base string
	waitFor(t, 15*time.Second, "the status page address on the console", func() bool {
		if m := addrRE.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
		}
		return base != ""
	})
	digits := regexp.MustCompile(`^[0-9]+$`)
	var s statuspage.Snapshot
	waitFor(t, 15*time.Second, "numbers in the backlog cells", func() bool {
		raw, _ := get(t, base+"/status.json")
		s = statuspage.Snapshot{}
		if err := json.Unmarshal([]byte(raw), &s); err != nil {
			t.Fatal(err)
		}
		for _, st := range statuspage.BacklogStates {
			if !digits.MatchString(s.View.Cells[statuspage.DownstreamKey("demo", "backlog_"+st)]) {
				return false
			}
		}
		return true
	})
	l, ok := lim(s, "demo", "demo-tenant")
	if !ok || l.Algorithm != "token_bucket" || l.Key != "tenant" || l.Rate != "4/s" || l.Burst != 8 {
		t.Errorf("limiter %+v (found %v), want demo-tenant: token_bucket, key tenant, 4/s burst 8", l, ok)
	}
	page, _ := get(t, base+"/")
	for _, want := range []string{"<td>token_bucket</td><td>tenant</td><td>4/s (burst 8)</td>", `">waits for a slot</dt>`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page has no %q", want)
		}
	}
	if strings.Contains(page, "bucket full</dt>") {
		t.Error(`the page still labels the count "bucket full" (reads like an error)`)
	}
	if !regexp.MustCompile(`<dt title="[^"]*not an error[^"]*">waits for a slot</dt>`).MatchString(page) {
		t.Error("the waits-for-a-slot label has no tooltip saying it is not an error")
	}
}

// A fair downstream's page shows its keys waiting, the Jain index of the
// last minute and the top keys by releases.
func TestFairSharePanel(t *testing.T) {
	b := setup(t, setupOpts{yaml: "downstreams:\n  - {name: api, rate: 20/s, fairness: {key: tenant}, handler: {type: log}}\n"})
	b.start(t)
	for i := range 40 {
		key := []string{"acme", "globex"}[i%2]
		if _, err := b.p.Enqueue(context.Background(), queue.Task{Downstream: "api", Key: key, Payload: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	var fi *statuspage.FairInfo
	waitFor(t, 20*time.Second, "both keys among the top keys", func() bool {
		s := b.snapshot(t)
		fi = s.Downstreams[0].Fair
		return fi != nil && len(fi.TopKeys) == 2 && fi.TopKeys[0].Releases+fi.TopKeys[1].Releases >= 30
	})
	if fi.JainIndex < 0.9 || fi.JainIndex > 1 {
		t.Errorf("Jain index %v for two keys served alternately, want 0.9-1", fi.JainIndex)
	}
	cell := b.snapshot(t).View.Cells[statuspage.DownstreamKey("api", "fair")]
	if !strings.Contains(cell, "Jain") || !strings.Contains(cell, "acme") {
		t.Errorf("fair share cell %q, want the Jain index and the top keys", cell)
	}
}
