package bench

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/testsink"
)

// fairHits builds the sink's hits from releases in seconds after t0 by
// tenant; a hit's release stamp is its Wake, except tenant C's, which
// have none (the arrival stands in).
func fairHits(t0 time.Time, rel map[string][]float64) []testsink.Hit {
	var hits []testsink.Hit
	for _, k := range fairTenants {
		for i, s := range rel[k] {
			at := t0.Add(time.Duration(s * float64(time.Second)))
			b, _ := json.Marshal(tenantTask{k, i})
			h := testsink.Hit{At: at.Add(10 * time.Millisecond), Wake: at, Payload: string(b), Status: 200}
			if k == "C" {
				h.At, h.Wake = at, time.Time{}
			}
			hits = append(hits, h)
		}
	}
	return hits
}

func secs(t0 time.Time, xs ...float64) []time.Time {
	out := make([]time.Time, len(xs))
	for i, s := range xs {
		out[i] = t0.Add(time.Duration(s * float64(time.Second)))
	}
	return out
}

// A has work from 0 s, B from 1.0 s, C from 1.2 s; B is done at 2.25 s:
// all three had work over [1.2 s, 2.25 s], where A released 2, B 2 and C 1.
func TestFillFair(t *testing.T) {
	t0 := time.Unix(3000, 0)
	enq := map[string][]time.Time{"A": secs(t0, 0, 0, 0, 0, 0, 0), "B": secs(t0, 1.0, 1.1), "C": secs(t0, 1.2, 1.2)}
	hits := fairHits(t0, map[string][]float64{"A": {0.5, 1.0, 1.5, 2.0, 2.5, 3.0}, "B": {1.25, 2.25}, "C": {1.75, 2.75}})
	dup := hits[0] // A #0 again
	dup.Wake = dup.Wake.Add(100 * time.Millisecond)
	// and a payload of no tenant: not a task of the round, but a release
	hits = append(hits, dup, testsink.Hit{Payload: `{"n":1}`, At: t0.Add(500 * time.Millisecond)})

	for _, tc := range []struct {
		weights map[string]float64
		jain    float64
	}{
		{map[string]float64{"A": 1, "B": 1, "C": 1}, 25.0 / 27},   // 2, 2, 1
		{map[string]float64{"A": 2, "B": 1, "C": 1}, 16.0 / 18.0}, // 1, 2, 1 per unit of weight
	} {
		row := FairRow{}
		fillFair(&row, enq, map[string][]time.Time{"B": secs(t0, 1.2, 1.5)}, hits, tc.weights)
		if math.Abs(row.Jain-tc.jain) > 1e-4 {
			t.Errorf("weights %v: Jain = %v, want %.4f", tc.weights, row.Jain, tc.jain)
		}
		row.Jain = 0
		want := FairRow{Delivered: 10, Duplicates: 1, BFirstS: 0.25, BLastS: 1.25, BWaitP50S: 0.25, BWaitP99S: 1.15,
			BExpErrP50S: 0.05, BExpErrP95S: 0.75, BExpErrMaxS: 0.75, BExpTasks: 2, // released 1.25 and 2.25, expected 1.2 and 1.5
			BusyS: 1.05, ShareA: 0.4, ShareB: 0.4, ShareC: 0.2,
			RateUnderBacklog: 4, // 7 releases over 1.5..3.0 s, the first second left out
			MaxIn1s:          5} // 0.5 (twice), 0.6 (the duplicate), 1.0, 1.25
		if row != want {
			t.Errorf("weights %v:\n got %+v\nwant %+v", tc.weights, row, want)
		}
	}
}

// FIFO: B's tasks come after A's whole backlog, so the three never had
// work together; the table shows no shares for it.
func TestBusySharesNeverTogether(t *testing.T) {
	t0 := time.Unix(3000, 0)
	enq := map[string][]time.Time{"A": secs(t0, 0, 0), "B": secs(t0, 1), "C": secs(t0, 1)}
	rel := map[string][]time.Time{"A": secs(t0, 0.5, 0.9), "B": secs(t0, 1.1), "C": secs(t0, 1.2)}
	w := map[string]float64{"A": 1, "B": 1, "C": 1}
	if sh := busyShares(enq, rel, w); sh.span > 0 || sh.jain != 0 {
		t.Errorf("busyShares = %+v, want no window and no index", sh)
	}
	delete(enq, "C")
	if sh := busyShares(enq, rel, w); sh.span != 0 || sh.share != nil {
		t.Errorf("busyShares without C's enqueues = %+v, want the zero value", sh)
	}
	md := fairTable([]FairRow{{Mode: "FIFO", TasksA: 2, TasksBC: 1, Delivered: 4, Rate: 50, BusyS: -0.1}})
	if !strings.Contains(md, "| – | – |") || !strings.Contains(md, "– (FIFO)") {
		t.Errorf("FIFO row without a common window should show – for shares and Jain:\n%s", md)
	}
}
