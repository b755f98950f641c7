package shaping

import (
	"fmt"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/shaper-io/shaper/internal/cronspec"
	"github.com/shaper-io/shaper/limiters"
)

// CronParser reads cron expressions with an optional seconds field, the
// descriptors (@every 10s, @daily, …) and a CRON_TZ=/TZ= prefix.
var CronParser = cronspec.Parser

// RateChange sets a downstream's rate each time its cron expression fires.
type RateChange struct {
	Spec string // as written, for messages
	// When fires at each change (a parsed Spec).
	When cron.Schedule
	// Rate is the rate from then on (Rate and Period only are read).
	Rate limiters.Limit
}

// RateSchedule is a time-of-day rate: the rate in force at t is that of the
// change that fired last at or before t. (A legacy database that takes 50
// writes/s in business hours and 500/s at night is two changes:
// "0 8 * * 1-5" → 50/s and "0 20 * * 1-5" → 500/s.)
type RateSchedule []RateChange

// ParseRateChange parses one entry.
func ParseRateChange(spec, rate string, loc *time.Location) (RateChange, error) {
	spec = cronspec.InZone(spec, loc)
	s, err := CronParser.Parse(spec)
	if err != nil {
		return RateChange{}, fmt.Errorf("invalid cron expression %q: %v", spec, err)
	}
	l, err := limiters.ParseLimit(rate)
	if err != nil {
		return RateChange{}, err
	}
	return RateChange{Spec: spec, When: s, Rate: l}, nil
}

// lookback bounds the search for a change's last firing: a year covers
// every schedule cron can express that fires at least yearly.
var lookbacks = []time.Duration{time.Hour, 25 * time.Hour, 8 * 24 * time.Hour, 32 * 24 * time.Hour, 367 * 24 * time.Hour}

// last returns the latest firing of s at or before t.
func last(s cron.Schedule, t time.Time) (time.Time, bool) {
	for _, back := range lookbacks {
		from := t.Add(-back)
		var prev time.Time
		found := false
		// step through firings in (from, t]; bounded so "@every 1s" over an
		// hour is cheap and nothing loops forever
		for i, at := 0, s.Next(from); i < 100000 && !at.After(t) && !at.IsZero(); i, at = i+1, s.Next(at) {
			prev, found = at, true
		}
		if found {
			return prev, true
		}
	}
	return time.Time{}, false
}

// At is the rate in force at t, and when it next changes; ok is false when
// no change has fired in the past year (the caller keeps its base rate).
func (rs RateSchedule) At(t time.Time) (rate limiters.Limit, next time.Time, ok bool) {
	var best time.Time
	for _, c := range rs {
		if at, found := last(c.When, t); found && (!ok || at.After(best)) {
			best, rate, ok = at, c.Rate, true
		}
		if n := c.When.Next(t); !n.IsZero() && (next.IsZero() || n.Before(next)) {
			next = n
		}
	}
	return rate, next, ok
}

// Overlap reports two changes that fire at the same instant within the
// next year after from (the schedule would be ambiguous then): their
// indexes and the instant.
func (rs RateSchedule) Overlap(from time.Time) (i, j int, at time.Time, found bool) {
	scheds := make([]cron.Schedule, len(rs))
	for k, c := range rs {
		scheds[k] = c.When
	}
	return cronspec.Overlap(scheds, from)
}
