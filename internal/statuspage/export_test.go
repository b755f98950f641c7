package statuspage

import (
	"context"
	"time"

	"github.com/shaper-io/shaper/shaping"
)

// Record takes one sample now, as Run does every Interval.
func Record(p *Page) { p.record(p.take(p.opts.Now())) }

// Secs is secs, for its test.
var Secs = secs

// ReadFleet is one fleet exchange, as Run does every Interval.
func ReadFleet(p *Page, ctx context.Context) { p.readFleet(ctx) }

// SetFleetID names f's process (two pages in one test process).
func SetFleetID(f *Fleet, id string) { f.self.ID = id }

// QuotaText is quotaText, for its test.
var QuotaText = quotaText

// HumanQuota is humanQuota of a quota with these fields, for its test.
func HumanQuota(limit int64, per time.Duration, aligned bool, offset time.Duration) string {
	return humanQuota(shaping.Quota{Limit: limit, Per: per, Aligned: aligned, Offset: offset})
}
