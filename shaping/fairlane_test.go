package shaping

import (
	"container/list"
	"math"
	"testing"
	"time"
)

func order(q *list.List) string {
	var s []byte
	for e := q.Front(); e != nil; e = e.Next() {
		s = append(s, e.Value.(*waiter).key[0])
	}
	return string(s)
}

// A lane filled by one key's backlog serves a newcomer next; keys go by
// their waiters per unit of weight at the moment, each key in arrival
// order; a retry goes first.
func TestFairOrderLetsFewWaitersPass(t *testing.T) {
	o := newFairOrder(&Fairness{Weights: map[string]float64{"C": 4}})
	q := list.New()
	add := func(key string, front bool) *list.Element {
		return o.insert(q, &waiter{key: key, cost: 1, queued: true}, front)
	}
	for range 4 {
		add("A", false) // 4 waiting
	}
	add("B", false) // 2 waiting
	add("B", false)
	add("C", false) // 3 waiting, weight 4: 0.75
	add("C", false)
	add("C", false)
	o.sort(q)
	if got, want := order(q), "CCCBBAAAA"; got != want {
		t.Errorf("order %s, want %s", got, want)
	}
	e := add("A", true)
	o.sort(q)
	if q.Front() != e {
		t.Errorf("a retry is not first: %s", order(q))
	}
	o.removed(q.Remove(q.Front()).(*waiter))
	for range 3 { // C served
		o.removed(q.Remove(q.Front()).(*waiter))
	}
	add("A", false)
	add("D", false)
	o.sort(q)
	if got, want := order(q), "DBBAAAAA"; got != want {
		t.Errorf("order %s after C left and D came, want %s", got, want)
	}
}

func TestJain(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{{nil, 1}, {[]float64{5, 5, 5}, 1}, {[]float64{9, 0, 0}, 1.0 / 3}, {[]float64{2, 1}, 0.9}} {
		if got := Jain(tc.xs); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Jain(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}

// The last minute's releases per key, backlogged keys only in the index.
func TestFairStatsMinute(t *testing.T) {
	var s fairStats
	t0 := time.Unix(1000, 0)
	for i := range 30 {
		s.release("A", true, t0.Add(time.Duration(i)*time.Second))
		s.release("B", true, t0.Add(time.Duration(i)*time.Second))
	}
	s.release("C", false, t0.Add(29*time.Second))
	m := s.minute(t0.Add(30 * time.Second))
	if m["A"].n != 30 || m["B"].n != 30 || m["C"].n != 1 || m["C"].backlog {
		t.Errorf("minute: A %d B %d C %d (backlog %v), want 30, 30, 1 (false)", m["A"].n, m["B"].n, m["C"].n, m["C"].backlog)
	}
	if j := s.publish(nil, "api", &Fairness{}, t0.Add(30*time.Second)); j != 1 {
		t.Errorf("Jain %v over two equal backlogged keys, want 1 (C had no backlog)", j)
	}
	if got := s.minute(t0.Add(200 * time.Second)); len(got) != 0 {
		t.Errorf("after more than a minute: %v, want nothing", got)
	}
}
