package shaping

import (
	"fmt"
	"testing"
	"time"

	"github.com/shaper-io/shaper/limiters"
)

// A key's interval is its cost at key_rate stretched by the release's
// late tolerance (so that releases up to that late keep any second at
// key_rate + 1), and not at all when late releases are never skipped.
func TestFairKeyCeilingInterval(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for i, c := range []struct {
		rate, keyRate int64
		tol           time.Duration
		cost          int64
		want          time.Duration
	}{
		{5000, 2, 0, 1, 502500 * time.Microsecond},  // tol 5ms (the floor)
		{10, 2, 0, 1, 525 * time.Millisecond},       // tol 50ms: half of a 100ms slot
		{5000, 2, 0, 3, 1507500 * time.Microsecond}, // cost 3: 1.5s, tol 5ms
		{5000, 2, 20 * time.Millisecond, 1, 510 * time.Millisecond},
		{5000, 2, -1, 1, 500 * time.Millisecond}, // never skipped: no bound to pay for
	} {
		r, _ := testRunner(now, limiters.PerSecond(c.rate), Downstream{Name: "api", LateTolerance: c.tol})
		kc := newKeyCeiling(&lane{r: r}, &Fairness{KeyRate: limiters.PerSecond(c.keyRate)})
		if got := kc.interval(c.cost, "k"); got != c.want {
			t.Errorf("step %d: got %v, want %v", i, got, c.want)
		}
	}
}

// pick offers, in fair order, the first waiter of each key whose tat has
// come, all of the first one's cost; with none, how long until the
// earliest tat.
func TestFairKeyCeilingPick(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	r, clk := testRunner(now, limiters.PerSecond(100), Downstream{Name: "api", Fairness: &Fairness{KeyRate: limiters.PerSecond(2)}})
	l := newLane(r)
	add := func(key string, cost int64) {
		l.fair.insert(l.q, &waiter{key: key, cost: cost, queued: true, done: make(chan grant, 1)}, false, clk.Now(), 100)
	}
	for _, w := range []struct {
		key  string
		cost int64
	}{{"A", 1}, {"A", 1}, {"B", 2}, {"C", 1}, {"D", 1}, {"C", 1}} {
		add(w.key, w.cost)
	}
	l.kc.tat["A"] = now.Add(300 * time.Millisecond) // A waits 300ms
	l.kc.tat["D"] = now                             // D's has just come
	keys := func(p picked) string {
		var s string
		for _, c := range p.cands {
			s += fmt.Sprintf("%s%d", c.w.key, c.w.cost)
		}
		return s
	}
	// in fair order A, B, C, D (each key's first waiter: newcomers, in
	// arrival order), then A's and C's second
	p := l.kc.pick()
	if got, want := keys(p), "B2"; got != want || p.cost != 2 {
		t.Errorf("candidates %s of cost %d, want %s (A not yet; B first, so cost 2)", got, p.cost, want)
	}
	l.kc.tat["B"] = now.Add(100 * time.Millisecond)
	if got, want := keys(l.kc.pick()), "C1D1"; got != want {
		t.Errorf("candidates %s, want %s (one waiter per key)", got, want)
	}
	l.kc.tat["C"], l.kc.tat["D"] = now.Add(time.Second), now.Add(time.Second)
	if p := l.kc.pick(); len(p.cands) != 0 || p.wait != 100*time.Millisecond {
		t.Errorf("candidates %s, wait %v; want none until B's tat in 100ms", keys(p), p.wait)
	}
}
