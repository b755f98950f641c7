package clocktest

import (
	"testing"
	"time"
)

func fired(t interface{ C() <-chan time.Time }) (time.Time, bool) {
	select {
	case at := <-t.C():
		return at, true
	default:
		return time.Time{}, false
	}
}

func TestFakeFiresOnlyWhenAdvancedAndInDueOrder(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := New(start)
	a, b, c := f.NewTimer(2*time.Second), f.NewTimer(time.Second), f.NewTimer(3*time.Second)
	if _, ok := fired(a); ok {
		t.Fatal("a timer fired before the clock moved")
	}
	f.Advance(2 * time.Second)
	if at, ok := fired(b); !ok || !at.Equal(start.Add(time.Second)) {
		t.Errorf("b: fired %v at %v, want true at start+1s", ok, at)
	}
	if at, ok := fired(a); !ok || !at.Equal(start.Add(2*time.Second)) {
		t.Errorf("a: fired %v at %v, want true at start+2s", ok, at)
	}
	if _, ok := fired(c); ok {
		t.Error("c (due at +3s) fired at +2s")
	}
	if p := f.Pending(); len(p) != 1 || !p[0].Equal(start.Add(3*time.Second)) {
		t.Errorf("pending %v, want [start+3s]", p)
	}
	if !c.Stop() || c.Stop() {
		t.Error("Stop: want true once, then false")
	}
	f.Advance(time.Hour)
	if _, ok := fired(c); ok {
		t.Error("a stopped timer fired")
	}
	if !f.Now().Equal(start.Add(time.Hour + 2*time.Second)) {
		t.Errorf("Now = %v after advancing 2s and 1h", f.Now())
	}
	if _, ok := fired(f.NewTimer(0)); !ok {
		t.Error("a timer of 0 did not fire at once")
	}
}
