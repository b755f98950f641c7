package statuspage

import "context"

// Record takes one sample now, as Run does every Interval.
func Record(p *Page) { p.record(p.take(p.opts.Now())) }

// Secs is secs, for its test.
var Secs = secs

// ReadFleet is one fleet exchange, as Run does every Interval.
func ReadFleet(p *Page, ctx context.Context) { p.readFleet(ctx) }

// SetFleetID names f's process (two pages in one test process).
func SetFleetID(f *Fleet, id string) { f.self.ID = id }
