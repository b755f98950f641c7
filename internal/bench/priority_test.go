package bench

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/priority"
	"github.com/shaper-io/shaper/internal/testsink"
)

// Three urgent tasks enqueued at 1.0, 1.1 and 1.2 s are released at 1.05,
// 1.30 and 1.25 s (the first twice); the backlog is released every 0.1 s
// from 0 to 2 s, one of its releases without a release stamp.
func TestFillPriority(t *testing.T) {
	t0 := time.Unix(4000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(math.Round(s*1000)) * time.Millisecond) }
	hit := func(tag string, n int, rel float64) testsink.Hit {
		b, _ := json.Marshal(tenantTask{tag, n})
		return testsink.Hit{At: at(rel + 0.01), Wake: at(rel), Payload: string(b), Status: 200}
	}
	var hits []testsink.Hit
	for i := range 21 {
		hits = append(hits, hit(tagBacklog, i, float64(i)/10))
	}
	hits[3].Wake = time.Time{} // released at 0.3, arrived at 0.31
	hits = append(hits, hit(tagUrgent, 0, 1.05), hit(tagUrgent, 2, 1.25), hit(tagUrgent, 1, 1.30), hit(tagUrgent, 0, 1.06),
		testsink.Hit{At: at(0.5), Payload: `{"t":"other","n":0}`})
	backlog := map[string][]time.Time{tagBacklog: make([]time.Time, 21)}
	row := PriorityRow{Urgent: 3}
	fillPriority(&row, backlog, []time.Time{at(1.0), at(1.1), at(1.2)}, hits)
	want := PriorityRow{Urgent: 3, Delivered: 24, Duplicates: 1, UrgentDone: 3, Complete: true,
		LatP50S: 0.05, LatP95S: 0.2, LatMaxS: 0.2, // 0.05, 0.2, 0.05
		FirstS: 0.05, AllS: 0.3, EnqueueS: 0.2,
		Meanwhile: 3,  // 1.0, 1.1, 1.2 of [1.0, 1.3)
		Achieved:  14, // 15 releases from 1.0 to 2.0, the first second left out
		MaxIn1s:   16} // (0.3, 1.3]: backlog 0.31 and 0.4..1.3, the hit at 0.5, 4 urgent releases
	if row != want {
		t.Errorf("fillPriority:\n got %+v\nwant %+v", row, want)
	}
	row = PriorityRow{Urgent: 3}
	fillPriority(&row, backlog, []time.Time{at(1.0), at(1.1), at(1.2)}, hits[:21])
	if row.UrgentDone != 0 || row.Complete || row.LatMaxS != 0 {
		t.Errorf("no urgent release: %+v, want none counted", row)
	}
	if md := priorityTable([]PriorityRow{row}); !strings.Contains(md, "| – | – | – |") {
		t.Errorf("a row without urgent releases should show – for the latencies:\n%s", md)
	}
}

// Three tenants' backlogs enqueued at 0 s: t00 (the urgent key) and t01
// of 10 tasks, t02 of 4. t02 is released at 0.1-0.4 s and has run out,
// t01 at 0.1-0.4 and 0.6 s, t00 at 0.2 and 0.4 s: the count stops at
// 0.4 s, t02's last. Without t00's and t02's releases, the count runs to
// t01's last and both count 0.
func TestFillPriorityFair(t *testing.T) {
	t0 := time.Unix(4000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(math.Round(s*1000)) * time.Millisecond) }
	hit := func(tag string, n int, rel float64) testsink.Hit {
		b, _ := json.Marshal(tenantTask{tag, n})
		return testsink.Hit{At: at(rel + 0.01), Wake: at(rel), Payload: string(b), Status: 200}
	}
	backlog := map[string][]time.Time{"t00": slices.Repeat([]time.Time{t0}, 10), "t01": slices.Repeat([]time.Time{t0}, 10),
		"t02": slices.Repeat([]time.Time{t0}, 4)}
	var t01 []testsink.Hit
	for i := range 4 {
		t01 = append(t01, hit("t01", i, 0.1*float64(i+1)))
	}
	t01 = append(t01, hit("t01", 4, 0.6))
	hits := append(slices.Clone(t01), hit("t00", 0, 0.2), hit("t00", 1, 0.4), hit(tagUrgent, 0, 0.3))
	for i := range 4 {
		hits = append(hits, hit("t02", i, 0.1*float64(i+1)))
	}
	for i, tc := range []struct {
		hits []testsink.Hit
		want PriorityRow
	}{
		{hits, PriorityRow{Jain: 0.9259, UrgentKeyShare: 0.6}}, // 2, 4, 4: 10² / (3 × 36); 2/10 over 1/3
		{t01, PriorityRow{Jain: 0.3333, UrgentKeyShare: 0}},    // 0, 5, 0
		{nil, PriorityRow{}}, // nothing released: no index
	} {
		var row PriorityRow
		fillPriorityFair(&row, backlog, tc.hits, "t00")
		if row != tc.want {
			t.Errorf("step %d: got %+v, want %+v", i, row, tc.want)
		}
	}
	row := PriorityRow{Jain: 0.9259, UrgentKeyShare: 0.6}
	if md := priorityTable([]PriorityRow{row}); !strings.Contains(md, "| 0.9259 | 0.60 |") {
		t.Errorf("a fair row should show its Jain's index and the urgent key's share:\n%s", md)
	}
}

// The fair modes come only with PriorityOptions.Fair; their backlog waits
// at the level fair share orders, over Tenants keys, and the urgent tasks
// are the first tenant's.
func TestPriorityModes(t *testing.T) {
	po := PriorityOptions{Fair: true}.withDefaults()
	for i, tc := range []struct {
		fair  bool
		modes int
	}{{false, 3}, {true, 5}} {
		if got := len(priorityModes(tc.fair)); got != tc.modes {
			t.Errorf("step %d: priorityModes(%v) = %d modes, want %d", i, tc.fair, got, tc.modes)
		}
	}
	for _, m := range priorityModes(true) {
		l := priorityLoadOf(m, po)
		switch {
		case m.fair && (len(l.tenants) != 10 || l.urgentKey != "t00" || l.low != priority.Default || l.high != priority.First ||
			!slices.Contains(l.extra, "fairness: "+priorityFairness)):
			t.Errorf("%s: %+v; want 10 keyed tenants at priority 3, urgent t00's at 1, with fairness", m.name, l)
		case !m.fair && (len(l.tenants) != 1 || l.keyed || l.urgentKey != "" || slices.Contains(l.extra, "fairness: "+priorityFairness)):
			t.Errorf("%s: %+v; want the backlog under one tag, without keys or fairness", m.name, l)
		}
	}
}
