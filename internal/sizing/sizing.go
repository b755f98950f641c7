// Package sizing holds the rules that size a shaping downstream: which
// fields of a rate a bucket reads, the default worker budget and max
// cost, the longest interval one reservation may cover (and so the
// slowest rate a downstream may run at and the slowest pace a spread
// quota may set), the longest hold of one answer, and how late a release
// may start. The dispatcher (package shaping), the producer's predictions
// (package queue, through internal/bucket and internal/fairindex) and the
// config's validation (internal/config) apply them; they live here, below
// all three, so that checking a file does not import the dispatcher.
// Package shaping re-exports them (shaping.DefaultWorkers,
// shaping.MaxInterval).
package sizing

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/shaper-io/shaper/limiters"
)

// MaxInterval is the furthest one call may move a bucket's next_free; see
// shaping.MaxInterval.
const MaxInterval = 24 * time.Hour

// DefaultMaxHold is the longest one answer of a downstream holds it unless
// its configuration says otherwise; see shaping.DefaultMaxHold.
const DefaultMaxHold = time.Hour

// DefaultRetention is how long a completed task stays readable (asynq's
// Retention) on a downstream that sets none; see queue.DefaultRetention.
const DefaultRetention = time.Hour

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

// ValidateRate validates a shaping rate: Rate and Period only, as a
// bucket reads nothing else of a Limit (a downstream's burst is its own
// setting, and a fair key's ceiling has none).
func ValidateRate(l limiters.Limit) error {
	return limiters.Limit{Rate: l.Rate, Period: l.Period}.Validate()
}

// ErrRateTooSlow is wrapped by every SlowRateError (test with errors.Is).
var ErrRateTooSlow = errors.New("rate too slow for the largest release")

// SlowRateError reports a rate at which one release of Cost units would
// hold the downstream for longer than MaxInterval: the bucket refuses such
// a reservation (limiters.ErrCostExceedsCapacity), so every task that
// costs that much would be archived instead of waiting.
type SlowRateError struct {
	// Rate is the rate refused; Cost the largest release's cost.
	Rate limiters.Limit
	Cost int64
	// Hold is how long one release of Cost would hold the downstream at
	// Rate (saturated at the largest time.Duration).
	Hold time.Duration
}

// Error reads like "rate 1/25h is too slow: one release of cost 1 would
// hold the downstream for 25h0m0s, more than 24h0m0s".
func (e *SlowRateError) Error() string {
	hold := "longer than a time.Duration holds"
	if e.Hold < time.Duration(math.MaxInt64) {
		hold = "for " + e.Hold.Round(time.Second).String()
	}
	return fmt.Sprintf("rate %s is too slow: one release of cost %d would hold the downstream %s, more than %s", e.Rate.RateString(), e.Cost, hold, MaxInterval)
}

// Unwrap returns ErrRateTooSlow.
func (e *SlowRateError) Unwrap() error { return ErrRateTooSlow }

// CheckRate reports whether a downstream whose largest release costs cost
// units may run at rate: the interval of cost at rate must be at most
// MaxInterval. It is the one rule for a downstream's rate, its scheduled
// and adaptive rates and any runtime override (package shaping applies it
// as Downstream.CheckRate; internal/config to the file's rates). It does
// not check that rate itself is valid (limiters.Limit.Validate does).
func CheckRate(rate limiters.Limit, cost int64) error {
	if iv := rate.Interval(max(cost, 1)); iv > MaxInterval {
		return &SlowRateError{Rate: rate, Cost: max(cost, 1), Hold: iv}
	}
	return nil
}

// CheckSpread reports whether a quota of limit units per per may pace
// releases (spread): one release of cost units takes cost × per / limit
// of the quota's pace, which must be at most MaxInterval, as the bucket
// refuses a longer interval. It is the one rule for a spread quota
// (shaping's quota validation and internal/config both apply it).
func CheckSpread(limit int64, per time.Duration, cost int64) error {
	pace := limiters.Limit{Rate: limit, Period: per, Burst: 1}
	if iv := pace.Interval(max(cost, 1)); iv > MaxInterval {
		hold := "longer than a time.Duration holds"
		if iv < time.Duration(math.MaxInt64) {
			hold = iv.Round(time.Second).String()
		}
		return fmt.Errorf("spread paces one unit every per/limit (%s): a release of cost %d would take %s, more than %s (the longest one reservation may hold a downstream); drop spread or raise the limit",
			pace.Interval(1).Round(time.Millisecond), max(cost, 1), hold, MaxInterval)
	}
	return nil
}

// SpreadUnits is the most units a spread quota of limit per per paces
// within MaxInterval, at least 1: a downstream's default max cost stays
// within it, so that CheckSpread holds for the default.
func SpreadUnits(limit int64, per time.Duration) int64 {
	return max(limiters.Limit{Rate: limit, Period: per, Burst: 1}.UnitsIn(MaxInterval), 1)
}

// DefaultMaxCost is the largest cost a downstream accepts unless it
// declares its own: what its bucket holds, the units rate × maxWait lets
// through, or its burst, and at least 1; see shaping.DefaultMaxCost.
func DefaultMaxCost(rate limiters.Limit, maxWait time.Duration, burst int64) int64 {
	return max(rate.UnitsIn(maxWait), burst, 1)
}
