package shaping

import (
	"math"
	"testing"
	"time"
)

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

// A process that holds the last tasks of a light key serves them first
// when the other processes have been serving the heavy key: the shared
// service (others) counts there too. Here A and B were served alike in
