package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The dispatcher, the producer and cron each build their collectors from
// the Registerer they are given: on one registry they share one set.
func TestNewSharesCollectorsOnOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, b := New(reg), New(reg)
	if a.Releases != b.Releases || a.FailOpen != b.FailOpen || a.CronTicks != b.CronTicks {
		t.Fatal("a second New on the same registry built new collectors, want the registered ones")
	}
	a.Releases.WithLabelValues("api").Inc()
	b.Releases.WithLabelValues("api").Inc()
	if got := testutil.ToFloat64(a.Releases.WithLabelValues("api")); got != 2 {
		t.Errorf("releases = %v, want 2", got)
	}
	if n, err := testutil.GatherAndCount(reg, "shaper_shaping_releases_total"); err != nil || n != 1 {
		t.Errorf("gathered %d series of shaper_shaping_releases_total (%v), want 1", n, err)
	}
	if other := New(prometheus.NewRegistry()); other.Releases == a.Releases {
		t.Error("another registry got the same collectors")
	}
}

func TestNewNilRecordsNothing(t *testing.T) {
	m := New(nil)
	if m != nil {
		t.Fatalf("New(nil) = %v, want nil", m)
	}
	m.ObserveScript("shaping", time.Millisecond, nil) // must not panic
}

// A collector of the same name but another description is a conflict, not
// something to reuse.
func TestNewPanicsOnConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shaper_shaping_releases_total", Help: "other"}, []string{"x"}))
	defer func() {
		if recover() == nil {
			t.Error("New over a conflicting collector did not panic")
		}
	}()
	New(reg)
}
