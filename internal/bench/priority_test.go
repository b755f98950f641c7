package bench

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

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
	row := PriorityRow{Urgent: 3}
	fillPriority(&row, []time.Time{at(1.0), at(1.1), at(1.2)}, hits)
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
	fillPriority(&row, []time.Time{at(1.0), at(1.1), at(1.2)}, hits[:21])
	if row.UrgentDone != 0 || row.Complete || row.LatMaxS != 0 {
		t.Errorf("no urgent release: %+v, want none counted", row)
	}
	if md := priorityTable([]PriorityRow{row}); !strings.Contains(md, "| – | – | – |") {
		t.Errorf("a row without urgent releases should show – for the latencies:\n%s", md)
	}
}
