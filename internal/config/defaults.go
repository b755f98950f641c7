package config

import (
	"cmp"
	"fmt"

	"github.com/shaper-io/shaper/internal/fairindex"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/sizing"
	"github.com/shaper-io/shaper/limiters"
)

// fill sets the defaults of the fields the file leaves out; set reports
// whether the file sets a field path. It reports the errors that only the
// file's text shows (a field written with a zero value where the default
// would hide it).
func (c *Config) fill(set func(path string) bool) *Error {
	for i := range c.Cron {
		j := &c.Cron[i]
		p := fmt.Sprintf("cron[%d]", i)
		if !set(p + ".cost") {
			j.Cost = 1
		}
		j.Type = cmp.Or(j.Type, "shaper:cron")
	}
	r := &c.Redis
	r.Prefix = cmp.Or(r.Prefix, keys.DefaultPrefix)
	if !set("redis.timeout") {
		r.Timeout = Duration(DefaultRedisTimeout)
	}
	h := &c.HTTP
	switch {
	case !set("http.listen"):
		h.Listen = DefaultListen
	case h.Listen == "":
		h.Listen = ListenOff
	}
	if !set("http.max_body") {
		h.MaxBody = DefaultMaxBody
	}
	if !set("shutdown_timeout") {
		c.ShutdownTimeout = Duration(DefaultShutdownTimeout)
	}
	for i := range c.Downstreams {
		d := &c.Downstreams[i]
		p := fmt.Sprintf("downstreams[%d]", i)
		if !set(p + ".burst") {
			d.Burst = DefaultBurst
		}
		hasWait, hasCap := set(p+".max_wait"), set(p+".capacity")
		switch {
		case hasWait && hasCap:
			return errf(p+".capacity", "%d set together with max_wait %s (use one: capacity = max_wait × rate)", d.Capacity, d.MaxWait)
		case hasCap && d.Capacity == 0:
			return errf(p+".capacity", "must be at least 1, got 0")
		case !hasWait && !hasCap:
			d.MaxWait = Duration(DefaultMaxWait)
		}
		if e := d.refuseZeros(p, set); e != nil {
			return e
		}
		if !set(p + ".max_hold") {
			d.MaxHold = Duration(DefaultMaxHold)
		}
		if !set(p + ".workers") {
			d.Workers = sizing.DefaultWorkers(d.Limit(), d.MaxWaitDuration())
		}
		if !set(p + ".max_retry") {
			d.MaxRetry = DefaultMaxRetry
		}
		if !set(p + ".retention") {
			d.Retention = Duration(DefaultRetention)
		}
		if d.Handler.Type == HandlerHTTP {
			d.Handler.Method = cmp.Or(d.Handler.Method, DefaultMethod)
		}
		if !set(p + ".handler.timeout") {
			d.Handler.Timeout = Duration(DefaultHandlerTimeout)
		}
		d.fillBatch(p, set)
		d.fillRollout()
		d.fillBreaker(p, set)
		if a := d.Admission; a != nil {
			a.OnReject = cmp.Or(a.OnReject, Reject)
			a.Failure = cmp.Or(a.Failure, FailClosed)
			for j := range a.Limiters {
				l := &a.Limiters[j]
				if lp := fmt.Sprintf("%s.admission.limiters[%d].burst", p, j); set(lp) && l.Burst == 0 {
					return errf(lp, "must be at least 1, got 0 (leave burst out for the rate's count)")
				}
				l.Name = cmp.Or(l.Name, fmt.Sprintf("%s-%d", d.Name, j))
				l.Algorithm = cmp.Or(l.Algorithm, limiters.TokenBucket)
				l.Key = cmp.Or(l.Key, KeyTenant)
			}
		}
	}
	return nil
}

// refuseZeros reports a field the file sets to zero where zero is outside
// its range but means "the default" (or "none") in a Config built in code:
// written in the file, a zero would silently become something else.
func (d *Downstream) refuseZeros(p string, set func(path string) bool) *Error {
	type field struct {
		path   string
		zero   bool
		got    string
		reason string
	}
	fields := []field{
		{".max_cost", d.MaxCost == 0, "0", "must be at least 1 (leave it out for what the bucket holds)"},
		{".max_hold", d.MaxHold == 0, "0s", fmt.Sprintf("must be more than 0 and at most %s (leave it out for %s)", sizing.MaxInterval, DefaultMaxHold)},
		{".concurrency", d.Concurrency == 0, "0", fmt.Sprintf("must be 1-%d (leave it out for no cap)", sizing.MaxConcurrency)},
		{".key_concurrency", d.KeyConcurrency == 0, "0", fmt.Sprintf("must be 1-%d (leave it out for no cap)", sizing.MaxConcurrency)},
		{".lease", d.Lease == 0, "0s", "must be 1s to 1h (leave it out for 10s)"},
	}
	if f := d.Fairness; f != nil {
		fields = append(fields, field{".fairness.default_weight", f.DefaultWeight == 0, "0", fmt.Sprintf("must be in (0, %g] (leave it out for 1)", float64(fairindex.MaxWeight))})
	}
	if a := d.Adaptive; a != nil {
		fields = append(fields,
			field{".adaptive.decrease", a.Decrease == 0, "0", "must be between 0 and 1, exclusive (leave it out for 0.75)"},
			field{".adaptive.interval", a.Interval == 0, "0s", "must be positive (leave it out for 1s)"})
	}
	for j, qt := range d.Quotas {
		fields = append(fields, field{fmt.Sprintf(".quotas[%d].margin", j), qt.Margin == 0, "0s", "must be more than 0 and at most per/4 (leave it out for 20ms)"})
	}
	for _, f := range fields {
		if f.zero && set(p+f.path) {
			return errf(p+f.path, "%s, got %s", f.reason, f.got)
		}
	}
	return nil
}
