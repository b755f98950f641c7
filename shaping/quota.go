package shaping

import (
	"fmt"
	"strconv"
	"time"

	"github.com/shaper-io/shaper/internal/bucket"
	"github.com/shaper-io/shaper/internal/sizing"
	"github.com/shaper-io/shaper/limiters"
)

// Quota is a budget of Limit units per Per that a downstream's releases
// never pass, beside its rate: a third-party API's 5,000 calls an hour or
// 100,000 a day. It is checked in the same script call as the reservation,
// for every process sharing the Redis: a release needs room in each of its
// downstream's quotas. When one is spent the tasks wait in the queue (no
// attempt consumed) and releases resume, at the rate, when it has room
// again. The zero Quota is invalid (no limit).
type Quota struct {
	// Limit is the units allowed per window, at least 1 and at least any
	// task's cost.
	Limit int64
	// Per is the window's length: 1s to MaxQuotaPeriod, whole
	// milliseconds.
	Per time.Duration
	// Aligned makes the windows fixed, starting at Offset + k × Per from
	// the Unix epoch (Offset 0 and Per = 24h: each day from 00:00 UTC).
	// Unaligned (the zero value), the quota is sliding: no window of Per,
	// wherever it starts, holds more than Limit. Sliding windows count in
	// QuotaSubWindows sub-windows, so a unit counts for up to Per/60 longer
	// than Per.
	Aligned bool
	// Offset places aligned windows, 0 ≤ Offset < Per; only with Aligned.
	Offset time.Duration
	// Spread paces releases at Limit/Per at most, so that the quota lasts
	// its window rather than being spent at the full rate and waited out.
	Spread bool
	// Margin is how much later than its slot's late tolerance a release
	// may reach the downstream (network jitter) and still be counted in
	// the window of its slot; zero means DefaultQuotaMargin. The quota
	// counts each unit that much (plus the tolerance) longer, and never
	// places a slot that close before an aligned window's end.
	Margin time.Duration
}

// Quota bounds and defaults.
const (
	// MaxQuotaPeriod is the longest Quota.Per.
	MaxQuotaPeriod = 366 * 24 * time.Hour
	// MinQuotaPeriod is the shortest Quota.Per.
	MinQuotaPeriod = time.Second
	// QuotaSubWindows is how many sub-windows a sliding quota counts in.
	QuotaSubWindows = 60
	// DefaultQuotaMargin is Quota.Margin's default.
	DefaultQuotaMargin = 20 * time.Millisecond
)

// String reads like "5000/1h0m0s" (sliding) or "100000/24h0m0s@0s"
// (aligned, with its offset); metrics label quotas with it.
func (q Quota) String() string {
	s := strconv.FormatInt(q.Limit, 10) + "/" + q.Per.String()
	if q.Aligned {
		s += "@" + q.Offset.String()
	}
	return s
}

// Validate reports whether q is usable.
func (q Quota) Validate() error {
	switch {
	case q.Limit < 1:
		return fmt.Errorf("quota %s: Limit must be at least 1, got %d", q, q.Limit)
	case q.Per < MinQuotaPeriod || q.Per > MaxQuotaPeriod || q.Per%time.Millisecond != 0:
		return fmt.Errorf("quota %s: Per must be whole milliseconds from %s to %s, got %s", q, MinQuotaPeriod, MaxQuotaPeriod, q.Per)
	case q.Offset < 0 || q.Offset >= q.Per || (!q.Aligned && q.Offset != 0):
		return fmt.Errorf("quota %s: Offset must be in [0, Per) and only set with Aligned, got %s", q, q.Offset)
	case q.Margin < 0 || q.Margin > q.Per/4:
		return fmt.Errorf("quota %s: Margin must be between 0 and Per/4, got %s", q, q.Margin)
	}
	return nil
}

// shape names the quota's Redis state: its period, alignment and
// sub-window, so that a quota whose shape changes starts afresh.
func (q Quota) shape() string {
	if q.Aligned {
		return "a" + strconv.FormatInt(q.Per.Microseconds(), 10) + "_" + strconv.FormatInt(q.Offset.Microseconds(), 10)
	}
	return "s" + strconv.FormatInt(q.Per.Microseconds(), 10) + "_" + strconv.FormatInt(q.sub(), 10)
}

// sub is the µs a sliding quota counts in (aligned: the whole period).
func (q Quota) sub() int64 {
	per := q.Per.Microseconds()
	if q.Aligned {
		return per
	}
	return (per + QuotaSubWindows - 1) / QuotaSubWindows
}

// spreadInterval is the µs cost units occupy at Limit/Per (0 unless
// Spread).
func (q Quota) spreadInterval(cost int64) int64 {
	if !q.Spread {
		return 0
	}
	us, ok := limiters.Limit{Rate: q.Limit, Period: q.Per, Burst: 1}.IntervalMicros(cost)
	if !ok {
		return maxIntervalUS + 1
	}
	return us
}

// QuotaUse is one quota's state as a reservation saw it.
type QuotaUse struct {
	Quota Quota
	// Used is the units that count against the quota now (slots
	// reserved ahead included), at most its Limit.
	Used int64
	// Reset is when Used next falls: the aligned window's end, or when the
	// oldest counted units stop counting; zero when nothing counts.
	Reset time.Time
}

// validateQuotas checks a downstream's quotas: each valid, no two of one
// shape, each at least the largest cost of a release, and a spread one
// pacing that release within MaxInterval (sizing.CheckSpread).
func validateQuotas(qs []Quota, maxCost int64) error {
	seen := map[string]bool{}
	for _, q := range qs {
		if err := q.Validate(); err != nil {
			return err
		}
		if seen[q.shape()] {
			return fmt.Errorf("quota %s: two quotas of the same period and alignment", q)
		}
		seen[q.shape()] = true
		if maxCost > q.Limit {
			return fmt.Errorf("quota %s: MaxCost %d is above the limit: such a task could never be released", q, maxCost)
		}
		if q.Spread {
			if err := sizing.CheckSpread(q.Limit, q.Per, maxCost); err != nil {
				return fmt.Errorf("quota %s: %w", q, err)
			}
		}
	}
	return nil
}

// minQuota is the smallest quota limit (0 without quotas).
func minQuota(qs []Quota) int64 {
	m := int64(0)
	for _, q := range qs {
		if m == 0 || q.Limit < m {
			m = q.Limit
		}
	}
	return m
}

const maxIntervalUS = bucket.MaxIntervalUS
