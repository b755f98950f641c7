package statuspage

// Record takes one sample now, as Run does every Interval.
func Record(p *Page) { p.record(p.take(p.opts.Now())) }

// Secs is secs, for its test.
var Secs = secs
