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
// start by default: half the slot it occupies at rate, at least 5ms. Half
// a slot keeps any window of T at rate·T+1 releases; the 5ms floor keeps
// fast downstreams (slots under 10ms) from wasting most slots to ordinary
// scheduling jitter, at the price of rate·5ms extra in the worst window.
func LateTolerance(rate limiters.Limit, cost int64) time.Duration {
	return max(rate.Interval(cost)/2, MinLateTolerance)
}
