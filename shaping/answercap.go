package shaping

import (
	"strconv"
	"time"
)

// What a downstream answers can hold it (an announced reset, a
// Retry-After) and charge it (a reported cost). One answer, buggy or
// hostile, must not freeze a stream or speed it up: a hold is cut to
// MaxHold, a cost to its cap, and a cost below 1 is refused as it is at
// enqueue. Each cut is logged (at most every clampLogEvery per downstream
// and kind), counted (shaper_shaping_answer_clamped_total) and kept for
// the status page (Limits.Clamp).

// clampLogEvery bounds the log lines of one kind of cut per downstream.
const clampLogEvery = 10 * time.Second

// capHold cuts a hold of d, said by header, to the downstream's MaxHold.
func (r *runner) capHold(d time.Duration, header string) time.Duration {
	if d <= r.ds.MaxHold {
		return d
	}
	r.clamped(Clamp{What: "hold", Header: header, Said: d.Round(time.Second).String(),
		Applied: r.ds.MaxHold.String()})
	return r.ds.MaxHold
}

// costCap is the most one settled call may cost: the task's MaxCost,
// no more than the smallest quota's limit or what the rate spends in
// MaxHold, and never less than the cost it was reserved at. Add keeps
// MaxCost within the smallest quota, so one answer spends a quota no
// further than a task enqueued at MaxCost would (by default what the
// bucket holds, rate × MaxWait). The cap goes no lower: a quota counts
// what the downstream counts, and a real cost settled below it would
// run into its 429s.
func (r *runner) costCap(t *Task) int64 {
	c := r.ds.maxReleaseCost()
	if m := minQuota(r.ds.Quotas); m > 0 {
		c = min(c, m)
	}
	c = min(c, max(r.rate.Load().UnitsIn(r.ds.MaxHold), 1))
	return max(c, t.Cost)
}

// settleCost is what t's reported cost settles at; ok is false when it
// is refused (below 1: the reservation's cost stands).
func (r *runner) settleCost(t *Task, reported int64) (cost int64, ok bool) {
	if reported < 1 {
		r.clamped(Clamp{What: "cost_low", Header: "reported cost", Said: strconv.FormatInt(reported, 10)})
		return t.Cost, false
	}
	if c := r.costCap(t); reported > c {
		r.clamped(Clamp{What: "cost_high", Header: "reported cost", Said: strconv.FormatInt(reported, 10), Applied: strconv.FormatInt(c, 10)})
		return c, true
	}
	return reported, true
}

// clamped records, counts and (throttled) logs one cut.
func (r *runner) clamped(c Clamp) {
	c.At = r.d.cfg.Clock.Now()
	if m := r.d.m; m != nil {
		m.Limits.Clamped.WithLabelValues(r.ds.Name, c.What).Inc()
	}
	s := &r.clamp
	s.mu.Lock()
	s.last = c
	if s.logged == nil {
		s.logged = map[string]time.Time{}
	}
	log := c.At.Sub(s.logged[c.What]) >= clampLogEvery
	if log {
		s.logged[c.What] = c.At
	}
	s.mu.Unlock()
	if !log {
		return
	}
	switch c.What {
	case "hold":
		r.d.log.Warn("shaping: an answer asked to hold the downstream longer than max_hold; held for max_hold",
			"downstream", r.ds.Name, "header", c.Header, "said", c.Said, "max_hold", c.Applied)
	case "cost_high":
		r.d.log.Warn("shaping: an answer reported a cost above its cap; settled at the cap",
			"downstream", r.ds.Name, "reported", c.Said, "cap", c.Applied)
	default:
		r.d.log.Warn("shaping: an answer reported a cost below 1; the reserved cost stands",
			"downstream", r.ds.Name, "reported", c.Said)
	}
}

// lastClamp is the runner's last Clamp (the zero value: none).
func (r *runner) lastClamp() Clamp {
	r.clamp.mu.Lock()
	defer r.clamp.mu.Unlock()
	return r.clamp.last
}
