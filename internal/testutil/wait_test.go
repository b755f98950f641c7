package testutil_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/testutil"
)

// fakeTB records a Fatalf instead of stopping the test.
type fakeTB struct {
	testing.TB
	failed string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
}

func TestWaitForReturnsOnceTheConditionHolds(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	start := time.Now()
	tb := &fakeTB{TB: t}
	testutil.WaitFor(tb, 5*time.Second, "three checks", func() bool { return n.Add(1) >= 3 })
	if tb.failed != "" {
		t.Fatalf("WaitFor failed: %s", tb.failed)
	}
	if got := n.Load(); got != 3 {
		t.Errorf("cond checked %d times, want 3 (it stops once cond holds)", got)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("WaitFor took %v for a condition true on the 3rd check, want about 2 polls", d)
	}
}

func TestWaitForFailsAtTheDeadline(t *testing.T) {
	t.Parallel()
	start := time.Now()
	tb := &fakeTB{TB: t}
	testutil.WaitFor(tb, 100*time.Millisecond, "never", func() bool { return false })
	if want := "timed out after 100ms waiting for never"; tb.failed != want {
		t.Errorf("failure = %q, want %q", tb.failed, want)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("WaitFor gave up after %v, before its deadline of 100ms", d)
	}
}

func TestEventually(t *testing.T) {
	t.Parallel()
	if !testutil.Eventually(time.Second, func() bool { return true }) {
		t.Error("Eventually(true) = false, want true")
	}
	if testutil.Eventually(50*time.Millisecond, func() bool { return false }) {
		t.Error("Eventually(false) = true, want false")
	}
}
