// Package cronspec is shaper's one cron syntax: the parser that rate
// schedules (package shaping), cron producers (package queue) and the
// config's validation (internal/config) all read expressions with, and the
// replay that finds two schedules firing at one instant.
package cronspec

import (
	"time"

	"github.com/robfig/cron/v3"
)

// Parser reads cron expressions with an optional seconds field, the
// descriptors (@every 10s, @daily, …) and a CRON_TZ=/TZ= prefix.
var Parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Overlap reports two schedules that fire at the same instant within the
// next year after from: their indexes and the instant. Each schedule is
// replayed for at most 20000 firings.
func Overlap(scheds []cron.Schedule, from time.Time) (i, j int, at time.Time, found bool) {
	end := from.Add(366 * 24 * time.Hour)
	seen := map[int64]int{}
	for k, s := range scheds {
		n := 0
		for t := s.Next(from); !t.IsZero() && t.Before(end) && n < 20000; t = s.Next(t) {
			if prev, dup := seen[t.Unix()]; dup && prev != k {
				return prev, k, t, true
			}
			seen[t.Unix()] = k
			n++
		}
	}
	return 0, 0, time.Time{}, false
}

// InZone is spec read in loc: spec with a CRON_TZ= prefix, unless loc is
// nil or time.Local (the parser's own zone).
func InZone(spec string, loc *time.Location) string {
	if loc != nil && loc != time.Local {
		return "CRON_TZ=" + loc.String() + " " + spec
	}
	return spec
}
