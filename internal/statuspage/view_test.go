package statuspage_test

import (
	"strings"
	"testing"

	"github.com/shaper-io/shaper/internal/statuspage"
)

// A card's details fold away, and hide the rows of features that are off
// and of counts still zero, in the JSON's rows and in the HTML; the rows
// of features that are on show. ?details=open renders them unfolded.
func TestCardHidesWhatIsOff(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: `
downstreams:
  - {name: plain, rate: 10/s, handler: {type: log}}
  - name: full
    rate: 10/s
    concurrency: 2
    fairness: {key: tenant}
    breaker: {window: 2s, min_calls: 5, cooldown: 1m}
    adaptive: {floor: 1/s}
    handler: {type: log}
`})
	s := b.snapshot(t)
	row := func(ds, f string) bool { return s.View.Rows[statuspage.DownstreamKey(ds, f)] }
	for _, f := range []string{"fleet", "override", "adaptive", "schedule", "lateness", "leases", "fair", "pushbacks", "bucket_full",
		"late_skips", "enqueued", "quarantined", "outcomes", "breaker", "breaker_moves", "quotas", "announced", "clamp",
		"settled", "shaping_mode", "shadow_wait", "deadline"} {
		if row("plain", f) {
			t.Errorf("plain's %s row is shown, want it hidden (off or zero)", f)
		}
	}
	for _, f := range []string{"configured", "in_force", "releases", "held"} {
		if !row("plain", f) {
			t.Errorf("plain's %s row is hidden, want it shown", f)
		}
	}
	for _, f := range []string{"leases", "fair", "breaker", "adaptive"} {
		if !row("full", f) {
			t.Errorf("full's %s row is hidden, want it shown (configured)", f)
		}
	}
	page, _ := get(t, b.url+"/")
	for _, want := range []string{`data-row="ds/plain/settled" hidden>`, `data-row="ds/plain/quarantined" hidden>`,
		`data-row="ds/full/leases">`, "<details><summary>details</summary>"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if open, _ := get(t, b.url+"/?details=open"); !strings.Contains(open, "<details open><summary>") {
		t.Error("GET /?details=open does not unfold the details")
	}
	// the headline and the why-waiting line have their elements
	for _, f := range []string{"why_kind", "why", "achieved", "achieved_of", "backlog", "backlog_note", "drain", "drain_note"} {
		if !strings.Contains(page, `data-k="`+statuspage.DownstreamKey("plain", f)+`"`) {
			t.Errorf("the page has no %s element for plain", f)
		}
	}
}
