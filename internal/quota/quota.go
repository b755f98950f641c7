// Package quota is a downstream's quota: the model the config file and
// the dispatcher share (package shaping re-exports it as shaping.Quota)
// and its one rule (Check), which names a field as the file and as Go
// spell it.
package quota

import (
	"fmt"
	"strconv"
	"time"

	"github.com/shaper-io/shaper/internal/bucket"
	"github.com/shaper-io/shaper/internal/field"
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
	// Per is the window's length: 1s to MaxPeriod, whole
	// milliseconds.
	Per time.Duration
	// Aligned makes the windows fixed, starting at Offset + k × Per from
	// the Unix epoch (Offset 0 and Per = 24h: each day from 00:00 UTC).
	// Unaligned (the zero value), the quota is sliding: no window of Per,
	// wherever it starts, holds more than Limit. Sliding windows count in
	// SubWindows sub-windows, so a unit counts for up to Per/60 longer
	// than Per.
	Aligned bool
	// Offset places aligned windows, 0 ≤ Offset < Per; only with Aligned.
	Offset time.Duration
	// Spread paces releases at Limit/Per at most, so that the quota lasts
	// its window rather than being spent at the full rate and waited out.
	Spread bool
	// Margin is how much later than its slot's late tolerance a release
	// may reach the downstream (network jitter) and still be counted in
	// the window of its slot; zero means DefaultMargin. The quota
	// counts each unit that much (plus the tolerance) longer, and never
	// places a slot that close before an aligned window's end.
	Margin time.Duration
}

// Quota bounds and defaults.
const (
	// MaxPeriod is the longest Quota.Per.
	MaxPeriod = 366 * 24 * time.Hour
	// MinPeriod is the shortest Quota.Per.
	MinPeriod = time.Second
	// SubWindows is how many sub-windows a sliding quota counts in.
	SubWindows = 60
	// DefaultMargin is Quota.Margin's default.
	DefaultMargin = 20 * time.Millisecond
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

// Validate reports whether q is usable, naming the field.
func (q Quota) Validate() error {
	if p := q.check("", ""); p != nil {
		return p
	}
	return nil
}

// check is Validate's rule, naming a field under the paths f (the
// file's) and g (Go's): "" for a lone quota.
func (q Quota) check(f, g string) *field.Problem {
	switch {
	case q.Limit < 1:
		return problem(f, g, "limit", "Limit", "must be at least 1, got %d", q.Limit)
	case q.Per < MinPeriod || q.Per > MaxPeriod || q.Per%time.Millisecond != 0:
		return problem(f, g, "per", "Per", "must be whole milliseconds from %s to %s, got %s", MinPeriod, MaxPeriod, q.Per)
	case q.Offset < 0 || q.Offset >= q.Per || (!q.Aligned && q.Offset != 0):
		return problem(f, g, "align", "Offset", "must be in [0, Per) and only set with Aligned, got %s", q.Offset)
	case q.Margin < 0 || q.Margin > q.Per/4:
		return problem(f, g, "margin", "Margin", "must be between 0 and a quarter of the period (%s), got %s", q.Per/4, q.Margin)
	}
	return nil
}

// Shape names the quota's Redis state: its period, alignment and
// sub-window, so that a quota whose shape changes starts afresh.
func (q Quota) Shape() string {
	if q.Aligned {
		return "a" + strconv.FormatInt(q.Per.Microseconds(), 10) + "_" + strconv.FormatInt(q.Offset.Microseconds(), 10)
	}
	return "s" + strconv.FormatInt(q.Per.Microseconds(), 10) + "_" + strconv.FormatInt(q.Sub(), 10)
}

// Sub is the µs a sliding quota counts in (aligned: the whole period).
func (q Quota) Sub() int64 {
	per := q.Per.Microseconds()
	if q.Aligned {
		return per
	}
	return (per + SubWindows - 1) / SubWindows
}

// SpreadInterval is the µs cost units occupy at Limit/Per (0 unless
// Spread).
func (q Quota) SpreadInterval(cost int64) int64 {
	if !q.Spread {
		return 0
	}
	us, ok := limiters.Limit{Rate: q.Limit, Period: q.Per, Burst: 1}.IntervalMicros(cost)
	if !ok {
		return bucket.MaxIntervalUS + 1
	}
	return us
}

// problem names field (f's) and goField (g's) under the paths f and g.
func problem(f, g, name, goName, format string, args ...any) *field.Problem {
	return field.Errorf(name, goName, format, args...).Under(f, g)
}

// Check is the one rule for a downstream's quotas: each valid, no two of
// one period and alignment, each at least maxRelease (the largest
// release's cost: the max cost, times a batch's rows), and a spread one
// pacing that release within sizing.MaxInterval (sizing.CheckSpread).
// nil when all hold.
func Check(qs []Quota, maxRelease int64) *field.Problem {
	seen := map[string]int{}
	for i, q := range qs {
		f, g := fmt.Sprintf("quotas[%d]", i), fmt.Sprintf("Quotas[%d]", i)
		if p := q.check(f, g); p != nil {
			return p
		}
		if first, dup := seen[q.Shape()]; dup {
			return problem(f, g, "", "", "same period and alignment as quota [%d]: merge them (the smaller limit binds)", first)
		}
		seen[q.Shape()] = i
		if maxRelease > q.Limit {
			return problem(f, g, "limit", "Limit", "%d is below the largest release's cost, %d: such a task could never be released", q.Limit, maxRelease)
		}
		if q.Spread {
			if err := sizing.CheckSpread(q.Limit, q.Per, maxRelease); err != nil {
				return problem(f, g, "", "", "limit %d per %s with spread: %v", q.Limit, q.Per, err)
			}
		}
	}
	return nil
}

// CostCap is the most a release's task (or each row of a batch of rows)
// may cost by default under qs: within the smallest quota and what a
// spread quota paces within sizing.MaxInterval (sizing.SpreadUnits), per
// row, at least 1; 0 when qs is empty. A default max cost is capped by it,
// so that a downstream with quotas and no max cost always passes Check.
func CostCap(qs []Quota, rows int64) int64 {
	rows = max(rows, 1)
	c := int64(0)
	for _, q := range qs {
		u := q.Limit
		if q.Spread && q.Per > 0 {
			u = min(u, sizing.SpreadUnits(q.Limit, q.Per))
		}
		if u = max(u/rows, 1); c == 0 || u < c {
			c = u
		}
	}
	return c
}
