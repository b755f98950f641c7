package shaping

import (
	"context"
	"time"

	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/rlheader"
)

// answered acts on what the handler reported for t's call: one script call
// when the answer's cost differs from the reservation or it announces a
// limit that binds, none otherwise.
func (r *runner) answered(t *Task) {
	a := t.answer
	t.answer = answer{}
	diff := int64(0)
	if a.costSet {
		if c, ok := r.settleCost(t, a.cost); ok {
			diff = c - t.Cost
		}
	}
	var ann *lua.Announcement
	var src, effect, header string
	if a.header != nil {
		now := r.d.cfg.Clock.Now()
		if l, ok := rlheader.Binding(rlheader.ParseWith(a.header, now, r.ds.RateHeaders...)); ok && r.binds(l, t, now) {
			l.Reset = r.capHold(l.Reset, l.Header)
			// on the Redis clock, a margin after the reset (clocks differ)
			until := now.Add(l.Reset + DefaultQuotaMargin - r.offset.get())
			ann = &lua.Announcement{Remaining: l.Remaining, Until: until.UnixMicro(),
				Limit: l.Limit, Source: l.Source}
			src, effect, header = l.Source, "pace", l.Header
			if l.Remaining == 0 {
				effect = "hold"
			}
		}
	}
	if diff == 0 && ann == nil {
		return
	}
	b := r.bucket()
	unit, _ := b.Rate.IntervalMicros(1)
	burst, _ := b.Rate.IntervalMicros(max(b.Burst, 1) - 1)
	ctx, cancel := context.WithTimeout(context.Background(), r.d.cfg.RedisTimeout)
	defer cancel()
	bs := r.d.buckets
	start := time.Now()
	rep, err := bs.store.Settle(ctx, bs.space.Bucket(b.Name), lua.SettleArgs{Answers: bs.answerKeys(b.Name), Diff: diff,
		Unit: unit, Burst: min(burst, maxIntervalUS), Slot: t.Slot.UnixMicro(), Seq: t.seq, Announce: ann,
		Guard: b.quotaGuard(t.Cost), Floor: t.Slot.UnixMicro() + unit*(t.Cost+diff), Quotas: bs.quotaArgs(b)})
	r.d.m.ObserveScript("answer", time.Since(start), err)
	if err != nil {
		r.d.log.Warn("shaping: cannot apply the answer's cost or limit", "downstream", r.ds.Name, "err", err)
		return
	}
	if ann != nil {
		if !rep.Stored {
			effect = "stale"
		}
		r.limits.announced(*ann, rep.Left, effect, header)
	}
	if diff < 0 {
		// a refund moved the bucket's next slot back: the engine's next
		// take was timed by the slots before it (a batch: no-op)
		r.wakeTake()
	}
	m := r.d.m
	if m == nil {
		return
	}
	switch {
	case diff > 0:
		m.Limits.SettledCost.WithLabelValues(r.ds.Name, "charged").Add(float64(diff))
	case diff < 0:
		m.Limits.SettledCost.WithLabelValues(r.ds.Name, "refunded").Add(float64(-diff))
	}
	if ann != nil {
		if rep.Stored {
			m.Limits.AnnouncedReset.WithLabelValues(r.ds.Name).Set(float64(ann.Until) / 1e6)
		}
		m.Limits.Announcements.WithLabelValues(r.ds.Name, src, effect).Inc()
	}
	if ann != nil || rep.Left >= 0 {
		m.Limits.AnnouncedLeft.WithLabelValues(r.ds.Name).Set(float64(rep.Left))
	}
}

// binds reports whether an announced limit can constrain the downstream:
// nothing is left, or fewer units than the rate could issue between t's
// slot (the downstream had not seen what was reserved since) and the
// reset, plus what the bucket reserves ahead. An answer that cannot bind
// costs no Redis call.
func (r *runner) binds(l rlheader.Limit, t *Task, now time.Time) bool {
	if l.Remaining == 0 {
		return true
	}
	span := l.Reset + max(now.Sub(t.Slot.Add(r.offset.get())), 0) + r.lookahead()
	return l.Remaining <= r.rate.Load().UnitsIn(span)+max(r.ds.Burst, 1)
}
