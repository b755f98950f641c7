package shaping

import (
	"context"
	"time"

	"github.com/shaper-io/shaper/internal/fairindex"
	"github.com/shaper-io/shaper/internal/lua"
)

// Every downstream the engine serves (all but a batch, which asynq's
// server serves) reserves at the take: its policy (first-in first-out,
// priority strict or weighted, fair order) picks the next task among all
// waiting when the slot exists, with its key ceilings and its caps on
// calls in flight, in the same script (take.Downstream.Reserve). The
// task carries its slot to the release path in taken.slot (deadline.go),
// and runner.grantOf hands it out once; a slot wasted sends the task back
// to the queue for a take to reserve the next. The lane serves only what
// the take moves without a slot (more units than it reserves for one
// task) or whose headers say another cost than the take read.

// takeLeases is r's caps on calls in flight at the take, as the engine
// asks them before each take (a copy each time: the engine sets the
// take's token in it): the take moves no more tasks than the cap has
// places, passes over or holds aside the tasks of a key at its cap per
// key, and each task it moves holds one place from the
// take to its call's end (serveTake).
func (r *runner) takeLeases() func() *lua.TakeLeases {
	ds := r.ds
	base := lua.TakeLeases{Leases: r.d.space.Leases(ds.Name), Counts: r.d.space.LeaseCounts(ds.Name),
		Cap: int64(ds.Concurrency), KeyCap: int64(ds.KeyConcurrency), Lease: ds.leaseTime()}
	return func() *lua.TakeLeases {
		l := base
		return &l
	}
}

// releaseLease gives back a place among the calls in flight, whether
// the take or the lease lane gave it; under the engine, whose take
// decides the cap, the engine looks at the queue again (the place may let
// the next task go).
func (r *runner) releaseLease(member string) {
	r.leases.release(member)
	r.freedTake()
}

// takeCeiling is the key ceilings of r's takes on a fair downstream, as
// the engine asks them before each take: key_rate and key_rates (an
// operator's rate for a key comes first, in the script), stretched by
// the late tolerance at the rate in force, as keyCeiling.interval
// stretches them. What the file sets is read once.
func (r *runner) takeCeiling() func() *lua.TakeCeiling {
	base := lua.TakeCeiling{Prefix: r.d.space.KeyCeiling(r.ds.Name, ""), Margin: ceilingMargin}
	f := r.ds.Fairness
	if f.KeyRate.Rate > 0 {
		base.Interval = f.KeyRate.Interval(1)
	}
	if own := keyIntervals(f); len(own) > 0 {
		base.Rates, base.Fallback = r.d.space.Fair(r.ds.Name).Rates, base.Interval
		for _, iv := range own {
			base.Fallback = max(base.Fallback, iv)
		}
	}
	return func() *lua.TakeCeiling {
		c := base
		if r.ds.LateTolerance >= 0 {
			c.Tolerance = r.lateTolerance(1)
		}
		return &c
	}
}

// takeReserve is the reservation of r's next take; none in shadow mode,
// where a release does not wait for its slot.
func (r *runner) takeReserve() (lua.BucketArgs, bool) {
	if r.inShadow() {
		return lua.BucketArgs{}, false
	}
	a, err := r.d.buckets.TakeArgs(r.bucket())
	return a, err == nil
}

// takeReserved records what a take's reservation found, as the lane
// records its own (the status page's limits, the metrics, the clock
// offset).
func (r *runner) takeReserved(v lua.BucketReply) {
	res := reservation(r.bucket(), lua.BucketArgs{Interval: v.Interval, Cost: 1}, v)
	recv := r.d.cfg.Clock.Now()
	r.offset.observe(recv.Sub(res.Now), recv)
	r.observeReservation(res)
	if res.Count > 0 {
		r.observeWaits(res)
	}
}

// ceilingMargin is how long a key's tat STRING outlives its tat.
const ceilingMargin = time.Second

// keyIntervals is f's key_rates as intervals for one unit of cost (a
// zero rate is none of its own, as KeyRateOf has it).
func keyIntervals(f *Fairness) map[string]time.Duration {
	out := map[string]time.Duration{}
	for k, kr := range f.KeyRates {
		if kr.Rate > 0 {
			out[k] = kr.Interval(1)
		}
	}
	return out
}

// keyRatesEvery is how often a process makes sure its fair downstream's
// key_rates are where its takes read them (a flush loses them: the takes
// then give every key the slowest ceiling until this puts them back).
const keyRatesEvery = 30 * time.Second

// ensureKeyRates writes r's key_rates where its takes read them, unless
// they are there already (lua.Store.EnsureKeyRates); a no-op without.
func (r *runner) ensureKeyRates() {
	own := keyIntervals(r.ds.Fairness)
	if len(own) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.d.cfg.RedisTimeout)
	defer cancel()
	written, err := r.d.store.EnsureKeyRates(ctx, r.d.space.Fair(r.ds.Name).Rates, lua.KeyRatesVersion(own), fairindex.KeyTTL, own)
	switch {
	case err != nil:
		r.d.log.Warn("shaping: cannot write key_rates where the takes read them; they give every key the slowest ceiling meanwhile",
			"downstream", r.ds.Name, "err", err)
	case written:
		r.d.log.Info("shaping: key_rates written where the takes read them", "downstream", r.ds.Name, "keys", len(own))
	}
}

// maxTakeUnits is the most units of cost a task may have for its take to
// reserve its slot: the most the bucket grants one task (MaxCost, and no
// quota's limit less), as the lane's reservation checks it (Buckets.args).
func (ds Downstream) maxTakeUnits() int64 {
	m := ds.MaxCost
	for _, q := range ds.Quotas {
		m = min(m, q.Limit)
	}
	return max(m, 0)
}
