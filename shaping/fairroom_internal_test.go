package shaping

import (
	"testing"
	"time"

	"github.com/shaper-io/shaper/limiters"
)

// A fair lane holds at most its process's part of the look-ahead: at
// 50/s and 200ms, 10 slots over the live processes (4 of 3), at least 2
// and 20ms of slots;
// when it holds them it waits for its oldest to come, and a slot that
// came frees its place.
func TestFairRoomSharesTheLookAhead(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	rate := limiters.PerSecond(50)
	r, clk := testRunner(now, rate, Downstream{Name: "api", MaxWait: time.Second, Fairness: &Fairness{}})
	d := r.d
	l := &lane{r: r}
	for _, c := range []struct {
		procs int64
		want  int
	}{{0, 10}, {1, 10}, {3, 4}, {20, 2}} {
		d.procs.Store(c.procs)
		if got, _ := l.fairRoom(1); got != c.want {
			t.Errorf("%d processes: room %d, want %d", c.procs, got, c.want)
		}
	}
	// at 1000/s, 20 processes: 10 each, but never under 20ms (20 slots)
	fast := limiters.PerSecond(1000)
	r.rate.Store(&fast)
	d.procs.Store(20)
	if got, _ := l.fairRoom(1); got != 20 {
		t.Errorf("1000/s, 20 processes: room %d, want 20 (20ms of slots)", got)
	}
	r.rate.Store(&rate)
	d.procs.Store(3)
	for i := range 4 {
		l.ahead = append(l.ahead, now.Add(time.Duration(20*(i+1))*time.Millisecond))
	}
	if room, wait := l.fairRoom(1); room != 0 || wait != 20*time.Millisecond {
		t.Errorf("holding 4: room %d, wait %v; want 0 and 20ms (its oldest slot)", room, wait)
	}
	clk.Advance(20 * time.Millisecond)
	if room, _ := l.fairRoom(1); room != 1 || len(l.ahead) != 3 {
		t.Errorf("after its oldest came: room %d holding %d, want 1 and 3", room, len(l.ahead))
	}
}
