package shaping

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/limiters"
)

// applied is what the control loop last put in force on a downstream in
// this process, and what it logged once.
type applied struct {
	base    atomic.Pointer[limiters.Limit] // rate before the adaptive cap
	refused atomic.Pointer[limiters.Limit] // the override apply last ignored (logged once)
	// keyRefused: "key|rate" of runtime key rates ignored (logged once)
	keyRefused sync.Map
	lastInc    atomic.Int64 // unix ns of the last "inc" sent
	lastAR     atomic.Int64 // the adaptive rate last seen from Redis (milli-units/s)
	mode       atomic.Int32 // shaping mode last applied (modeUnknown before the first)
}

// seedOffset takes a few clock samples from the bucket's Redis node
// (peeks: nothing is written) before any worker starts, so the first
// releases are not timed from a first call's slow reply (a cold
// connection). Errors are ignored: workers sample on every reservation.
func (r *runner) seedOffset() {
	for i := 0; i < 5; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), r.d.cfg.RedisTimeout)
		res, err := r.d.buckets.Peek(ctx, r.bucket(), 1)
		cancel()
		if err != nil {
			return
		}
		recv := r.d.cfg.Clock.Now()
		r.offset.observe(recv.Sub(res.Now), recv)
	}
}

// fullRefresh is how often every downstream's state is re-read even
// when its version did not change: a version bump lost after its state
// was written (the writer got an error; a flushed Redis empties the
// versions too, which reads as a change). One HGETALL per downstream per
// process each time, the largest idle cost of the control loop at 100
// downstreams when it was 10 s.
const fullRefresh = 30 * time.Second

// controlLoop keeps every downstream's rate and pause current: on the
// ControlInterval tick after a change was announced (or every ControlPoll
// regardless) it reads the one versions hash and re-reads the state of
// the downstreams whose version moved; every tick applies the schedule
// from the cached state without Redis. Idle, that is one command per
// ControlPoll per process, however many downstreams it serves.
func (d *services) controlLoop(runners []*runner) {
	clk := d.cfg.Clock
	seen := map[string]string{}
	last := clk.Now()
	poll := d.cfg.ControlPoll
	if d.eng == nil {
		poll = d.cfg.ControlInterval // no subscription: nothing is announced here
	}
	var read time.Time // of the versions; zero: the first tick reads them
	for {
		t := clk.NewTimer(d.cfg.ControlInterval)
		select {
		case <-d.stopping:
			t.Stop()
			return
		case <-t.C():
		}
		now := clk.Now()
		full := now.Sub(last) >= fullRefresh
		if full {
			last = now
		}
		due := full || now.Sub(read) >= poll
		select {
		case <-d.notices:
			due = true
		default:
		}
		if !due {
			for _, r := range runners {
				r.apply()
			}
			continue
		}
		read = now
		ctx, cancel := context.WithTimeout(context.Background(), d.cfg.RedisTimeout)
		vers, err := d.control.Versions(ctx)
		retry := err != nil
		for _, r := range runners {
			v, changed := vers[r.ds.Name], false
			if err == nil && (full || v != seen[r.ds.Name]) {
				changed = r.refresh(ctx)
				retry = retry || !changed
			}
			if changed {
				if v != seen[r.ds.Name] {
					// a control change (a reset, a rate, a resume): sleeps
					// and pushback records sized by the old state end
					r.push.until.Store(0)
					r.push.bare.Store(0)
					r.wake()
				}
				seen[r.ds.Name] = v
			} else {
				r.apply()
			}
		}
		cancel()
		if retry {
			read = time.Time{} // Redis did not answer: the next tick reads again
		}
	}
}

// refresh re-reads the runtime state from Redis and applies it; false
// when Redis did not answer (the last known state stays: reservations fail
// closed anyway).
func (r *runner) refresh(ctx context.Context) bool {
	st, err := r.d.control.State(ctx, r.ds.Name)
	if err != nil {
		return false
	}
	r.smu.Lock()
	r.st = st
	r.smu.Unlock()
	r.apply()
	if r.brk != nil && r.brk.refresh(ctx) != nil {
		return false
	}
	if f := r.ds.Fairness; f != nil && f.Runtime != nil {
		kc, err := r.d.control.st.KeyControls(ctx, r.ds.Name)
		if err != nil {
			return false
		}
		r.setKeyControls(kc)
	}
	return true
}

// setKeyControls puts the key controls read from Redis in force, dropping
// a runtime rate the downstream could not run a key at (written by
// anything that did not check it), logged once per value.
func (r *runner) setKeyControls(kc map[string]KeyControl) {
	for k, c := range kc {
		if c.Rate.IsZero() {
			continue
		}
		if err := r.ds.CheckKeyRate(c.Rate); err != nil {
			if _, seen := r.applied.keyRefused.LoadOrStore(k+"|"+c.Rate.RateString(), true); !seen {
				r.d.log.Error("shaping: ignoring a key's runtime rate in Redis", "downstream", r.ds.Name,
					"key", k, "rate", c.Rate.RateString(), "err", err)
			}
			c.Rate = limiters.Limit{}
			kc[k] = c
		}
	}
	r.ds.Fairness.Runtime.Set(kc)
	if m := r.d.m; m != nil {
		var rate, weight, paused float64
		for _, c := range kc {
			if !c.Rate.IsZero() {
				rate++
			}
			if c.Weight > 0 {
				weight++
			}
			if c.Paused {
				paused++
			}
		}
		m.Fair.KeyControls.WithLabelValues(r.ds.Name, "rate").Set(rate)
		m.Fair.KeyControls.WithLabelValues(r.ds.Name, "weight").Set(weight)
		m.Fair.KeyControls.WithLabelValues(r.ds.Name, "paused").Set(paused)
	}
}

// apply computes the rate in force from the cached state: the schedule's
// (or the configured) rate, replaced by a runtime override, capped by the
// adaptive rate (never below this downstream's floor). An override that
// fails Downstream.CheckRate (written into Redis by anything that did not
// check: another config, a script) is ignored and logged once, rather
// than let the bucket archive every task: the schedule's or the
// configured rate holds instead.
func (r *runner) apply() {
	r.smu.Lock()
	st := r.st
	r.smu.Unlock()
	base := r.ds.Rate
	if len(r.ds.Schedule) > 0 {
		if l, _, ok := r.ds.Schedule.At(r.d.cfg.Clock.Now()); ok {
			base = l
		}
	}
	if err := r.checkOverride(st.Override); err == nil && !st.Override.IsZero() {
		base = st.Override
	}
	r.applied.base.Store(&base)
	eff := base
	if a := r.ds.Adaptive; a != nil {
		ar := r.clampAdaptive(base)
		if st.Adaptive > 0 {
			// another process's floor may be lower: this one's holds
			if ar = fromMilli(int64(st.Adaptive*1000 + 0.5)); ar.PerSec() < a.Floor.PerSec() {
				ar = a.Floor
			}
		}
		eff = slowerLimit(eff, ar)
	}
	r.setRate(eff)
	r.pause.set(st.Paused)
	r.applyMode(st)
	if m := r.d.m; m != nil {
		v := 0.0
		if st.Paused {
			v = 1
		}
		m.Paused.WithLabelValues(r.ds.Name).Set(v)
	}
}

// checkOverride applies CheckRate to an override (none passes) and logs
// one that fails it once, until the override changes.
func (r *runner) checkOverride(l limiters.Limit) error {
	if l.IsZero() {
		r.applied.refused.Store(nil)
		return nil
	}
	err := r.ds.CheckRate(l)
	if err == nil {
		r.applied.refused.Store(nil)
		return nil
	}
	if prev := r.applied.refused.Swap(&l); prev == nil || *prev != l {
		r.d.log.Error("shaping: ignoring the rate override in Redis: the downstream cannot run at it", "downstream", r.ds.Name,
			"override", l.RateString(), "err", err)
	}
	return err
}

func (r *runner) setRate(l limiters.Limit) {
	if cur := r.rate.Load(); cur != nil && *cur == l {
		return
	}
	r.rate.Store(&l)
	if m := r.d.m; m != nil {
		m.RateInForce.WithLabelValues(r.ds.Name).Set(l.PerSec())
	}
}

// clampAdaptive is where the adaptive rate starts: the base rate within
// [floor, ceiling].
func (r *runner) clampAdaptive(base limiters.Limit) limiters.Limit {
	a := r.ds.Adaptive
	switch {
	case base.PerSec() > a.Ceiling.PerSec():
		return a.Ceiling
	case base.PerSec() < a.Floor.PerSec():
		return a.Floor
	}
	return base
}

func slowerLimit(a, b limiters.Limit) limiters.Limit {
	if b.PerSec() < a.PerSec() {
		return b
	}
	return a
}

// adapt reports a downstream answer to the shared AIMD rate. Increases are
// sent at most twice per interval per process; the script applies at most
// one change per interval across all processes.
func (r *runner) adapt(event string) {
	a := r.ds.Adaptive
	if a == nil {
		return
	}
	iv := a.Interval
	if iv <= 0 {
		iv = time.Second
	}
	now := r.d.cfg.Clock.Now().UnixNano()
	if event == "inc" {
		last := r.applied.lastInc.Load()
		if now-last < int64(iv/2) || !r.applied.lastInc.CompareAndSwap(last, now) {
			return
		}
	}
	base := r.ds.Rate
	if b := r.applied.base.Load(); b != nil {
		base = *b
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.d.cfg.RedisTimeout)
	defer cancel()
	ar, err := r.d.control.adaptiveEvent(ctx, r.ds.Name, a, r.clampAdaptive(base), event, lua.NowArg(r.d.cfg.Clock))
	if err != nil {
		r.d.log.Warn("shaping: adaptive rate update failed", "downstream", r.ds.Name, "err", err)
		return
	}
	if prev := r.applied.lastAR.Swap(ar.Rate); prev != ar.Rate {
		// the shared rate moved: the other processes re-read it
		if err := r.d.control.bump(ctx, r.ds.Name); err != nil {
			r.d.log.Warn("shaping: adaptive rate announce failed", "downstream", r.ds.Name, "err", err)
		}
	}
	r.setRate(slowerLimit(base, ar))
	if m := r.d.m; m != nil && event == "dec" {
		m.AdaptiveDecreases.WithLabelValues(r.ds.Name).Inc()
	}
}

// isTimeout reports a handler error caused by the downstream not answering
// in time (a signal for the adaptive rate to back off).
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// applyMode sets the shaping mode from the runtime state. Back from
// shadow to enforce, the bucket is cleared: in shadow next_free runs ahead
// by the backlog enforcing would have built (that is the wait it
// reports), a backlog that does not exist, and enforcing against it would
// stall the downstream for that long.
func (r *runner) applyMode(st State) {
	m := modeEnforce
	if st.ModeOf("", r.ds.ShapingMode) == limiters.Shadow {
		m = modeShadow
	}
	if r.applied.mode.Load() == modeShadow && m == modeEnforce {
		// cleared before the mode says enforce, so that what reads the
		// mode as enforce finds the bucket cleared
		ctx, cancel := context.WithTimeout(context.Background(), r.d.cfg.RedisTimeout)
		defer cancel()
		if err := r.d.buckets.Reset(ctx, r.ds.Name); err != nil {
			r.d.log.Warn("shaping: clearing the bucket after shadow mode failed", "downstream", r.ds.Name, "err", err)
		}
	}
	r.applied.mode.Store(m)
	if mm := r.d.m; mm != nil {
		v := 0.0
		if m == modeShadow {
			v = 1
		}
		mm.ShadowMode.WithLabelValues(r.ds.Name).Set(v)
	}
}
