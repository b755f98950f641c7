// Package sizing holds the rules that size a shaping downstream: the
// default worker budget, the longest interval one reservation may cover
// and how late a release may start. The dispatcher (package shaping) and
// the config's validation (internal/config) both apply them; they live
// here, below both, so that checking a file does not import the
// dispatcher. Package shaping re-exports them (shaping.DefaultWorkers,
// shaping.MaxInterval).
package sizing

import (
	"time"

	"github.com/shaper-io/shaper/limiters"
)

// MaxInterval is the furthest one call may move a bucket's next_free; see
// shaping.MaxInterval.
const MaxInterval = 24 * time.Hour

// DefaultWorkers is ceil(rate × maxWait) + 1, between 2 and 1000; see
// shaping.DefaultWorkers.
func DefaultWorkers(rate limiters.Limit, maxWait time.Duration) int {
	n := rate.UnitsIn(maxWait)
	if n < 1000 && rate.Interval(n) < maxWait {
		n++ // round up
	}
	return int(min(max(n+1, 2), 1000))
}

// MinLateTolerance is the floor of LateTolerance.
const MinLateTolerance = 5 * time.Millisecond

// LateTolerance is how far behind its slot a release of cost units may
// start by default: half the slot it occupies at rate, at least 5ms, but
// below one slot when that still leaves 4ms. A release at most one slot
// late keeps any second at rate + 1 releases; the 5ms floor keeps fast
// downstreams (slots under 4ms) from wasting most slots to ordinary
// scheduling jitter, and for them the bucket paces a little slower
// (PaceSlack) so that the bound still holds.
func LateTolerance(rate limiters.Limit, cost int64) time.Duration {
	iv := rate.Interval(cost)
	tol := max(iv/2, MinLateTolerance)
	if tol >= iv && iv >= MinLateTolerance-time.Millisecond {
		tol = iv - time.Microsecond
	}
	return tol
}

// PaceSlack is how much longer than its exact interval a slot of cost
// units is spaced when releases may start up to tol late: zero when tol
// is under one slot; else interval × tol / 1s. Releases then start at
// least interval × (1 + tol/1s) apart in slot time, so those of any
// second, each at most tol late, come from an interval of 1s + tol of
// slots: at most rate + 1 of them (at 1000/s with the 5ms floor the
// downstream runs 0.5% below its rate; measured in docs/benchmarks.md).
func PaceSlack(rate limiters.Limit, cost int64, tol time.Duration) time.Duration {
	iv := rate.Interval(cost)
	if tol < iv {
		return 0
	}
	us := (int64(iv/time.Microsecond)*int64(tol/time.Microsecond) + 999999) / 1000000
	return time.Duration(us) * time.Microsecond
}
