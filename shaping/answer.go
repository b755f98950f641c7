package shaping

import (
	"context"
	"sync"
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

// wasted gives back to the quotas and the announced limit the units of
// slots that were reserved but never released (a late worker, a stocked
// slot past its time): the downstream never saw them. The bucket keeps
// them (a wasted slot is never replayed). Without quotas it does nothing;
// with them, one script call per slot, off the caller's path.
func (r *runner) wasted(cost int64, gs ...grant) {
	if len(gs) == 0 || len(r.ds.Quotas) == 0 {
		return
	}
	go func() {
		for _, g := range gs {
			if !r.unquota(cost, g) {
				return
			}
		}
	}()
}

// unquota gives the units of g's slot back to the quotas and the announced
// limit (not to the rate: the slot's time is gone either way); false when
// Redis failed.
func (r *runner) unquota(cost int64, g grant) bool {
	b := r.bucket()
	bs := r.d.buckets
	ctx, cancel := context.WithTimeout(context.Background(), r.d.cfg.RedisTimeout)
	defer cancel()
	start := time.Now()
	_, err := bs.store.Settle(ctx, bs.space.Bucket(b.Name), lua.SettleArgs{Answers: bs.answerKeys(b.Name),
		Diff: -cost, Slot: g.slot.UnixMicro(), Seq: g.issued, Guard: b.quotaGuard(cost), Quotas: bs.quotaArgs(b)})
	r.d.m.ObserveScript("answer", time.Since(start), err)
	if err != nil {
		r.d.log.Warn("shaping: cannot give a slot's units back to the quotas", "downstream", r.ds.Name, "err", err)
		return false
	}
	return true
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

// observeReservation records a lane reservation's quota state and what
// held it.
func (r *runner) observeReservation(res Reservation) {
	r.limits.reserved(res)
	m := r.d.m
	if m == nil {
		return
	}
	for _, q := range res.Quotas {
		l := q.Quota.String()
		m.Limits.QuotaUsed.WithLabelValues(r.ds.Name, l).Set(float64(q.Used))
		m.Limits.QuotaLimit.WithLabelValues(r.ds.Name, l).Set(float64(q.Quota.Limit))
		reset := 0.0
		if !q.Reset.IsZero() {
			reset = float64(q.Reset.UnixMicro()) / 1e6
		}
		m.Limits.QuotaReset.WithLabelValues(r.ds.Name, l).Set(reset)
	}
	if res.HeldBy != "" && res.HeldBy != "announced pace" {
		m.Limits.Holds.WithLabelValues(r.ds.Name, res.HeldBy).Inc()
	}
	m.Limits.AnnouncedPace.WithLabelValues(r.ds.Name).Set(res.pace())
}

// pace is the units per second the announced limit paced res at; 0 when
// it did not.
func (res Reservation) pace() float64 {
	if res.HeldBy != "announced pace" || res.interval <= 0 {
		return 0
	}
	return float64(res.cost) / res.interval.Seconds()
}

// Limits is what a downstream's quotas and announced limit looked like to
// this process at its last reservation and its last answer that carried a
// limit (for status pages).
type Limits struct {
	// Quotas is each quota's state at the last reservation.
	Quotas []QuotaUse
	// HeldBy is what held the last reservation ("" none; see
	// Reservation.HeldBy).
	HeldBy string
	// Pace is the pace the announced limit imposed on the last
	// reservation, in units per second; 0 when none did.
	Pace float64
	// Announced is the last binding limit this process's answers
	// announced; the zero value when none did.
	Announced Announced
	// Clamp is the last answer whose hold or cost this process cut or
	// refused; the zero value when none was.
	Clamp Clamp
}

// Announced is a limit a downstream's answer announced.
type Announced struct {
	// Source is the header that said it: ratelimit, x-ratelimit or
	// retry-after.
	Source string
	// Remaining and Limit are what the answer said (Limit 0: not said).
	Remaining, Limit int64
	// Left is what the announcement in force left after it (the
	// downstream's count less what was reserved after the task).
	Left int64
	// Reset is when its window resets.
	Reset time.Time
	// Effect is hold (nothing left until Reset), pace (less left than the
	// rate would spend) or stale (a later answer's is in force).
	Effect string
	// Header is the answer's field lines it was read from.
	Header string
}

// limitState holds a runner's Limits.
type limitState struct {
	mu sync.Mutex
	l  Limits
}

func (s *limitState) reserved(res Reservation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.l.Quotas, s.l.HeldBy, s.l.Pace = res.Quotas, res.HeldBy, res.pace()
}

func (s *limitState) announced(a lua.Announcement, left int64, effect, header string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.l.Announced = Announced{Source: a.Source, Remaining: a.Remaining, Limit: a.Limit, Left: left,
		Reset: time.UnixMicro(a.Until), Effect: effect, Header: header}
}

// Limits is downstream's quota and announced-limit state as this process
// last saw it, without a Redis call.
func (d *Dispatcher) Limits(downstream string) (Limits, error) {
	r, err := d.runner(downstream)
	if err != nil {
		return Limits{}, err
	}
	r.limits.mu.Lock()
	defer r.limits.mu.Unlock()
	l := r.limits.l
	l.Quotas = append([]QuotaUse(nil), l.Quotas...)
	l.Clamp = r.lastClamp()
	return l, nil
}
