package queue

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shaper-io/shaper/internal/control"
	"github.com/shaper-io/shaper/limiters"
)

// DefaultControlInterval is how stale a Producer lets its copy of the
// runtime state (admission modes, rate overrides) get while it enqueues:
// an enqueue after that re-reads it first, so `shaper ctl mode` reaches a
// producer within a second. An idle producer reads nothing.
const DefaultControlInterval = 500 * time.Millisecond

// fullRefresh is how often the runtime state is re-read even when no
// version moved (a lost bump, a flushed Redis), as the dispatcher does.
const fullRefresh = 10 * time.Second

// LimiterMode is one admission layer's mode: the mode its configuration
// gives, and the ModeVar its limiters.Layer reads, which the Producer sets
// from the runtime mode in Redis (shaping.Control.SetMode) when there is
// one and back to Configured when it is cleared.
type LimiterMode struct {
	// Name is the limiter's name (limiters.Config.Name).
	Name string
	// Configured is the mode without a runtime override.
	Configured limiters.Mode
	// Var is what the layer reads (limiters.Layer.Mode); required.
	Var *limiters.ModeVar
}

// follower keeps a producer's copy of the downstreams' runtime state
// current, lazily: the first enqueue after every ControlInterval reads the
// versions hash (one command) and the state of the downstreams whose
// version moved. Concurrent enqueues do not wait for it: one refreshes, the
// others go on with the copy they have.
type follower struct {
	ctl   *control.Store
	every time.Duration
	names []string // downstreams followed
	modes map[string][]LimiterMode
	m     func(ds, limiter string, shadow bool)

	busy sync.Mutex
	next atomic.Int64 // unix ns of the next refresh
	seen map[string]string
	full time.Time

	smu   sync.Mutex
	state map[string]control.State
}

// maybeRefresh refreshes if the copy is older than the interval and no
// other enqueue is refreshing it.
func (f *follower) maybeRefresh(ctx context.Context) {
	if f == nil || time.Now().UnixNano() < f.next.Load() || !f.busy.TryLock() {
		return
	}
	defer f.busy.Unlock()
	now := time.Now()
	if now.UnixNano() < f.next.Load() {
		return // another enqueue just did
	}
	f.next.Store(now.Add(f.every).UnixNano())
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.every)
	defer cancel()
	vers, err := f.ctl.Versions(ctx)
	if err != nil {
		return // the copy stays; admission decides on Redis anyway
	}
	full := now.Sub(f.full) >= fullRefresh
	if full {
		f.full = now
	}
	for _, ds := range f.names {
		if v, ok := f.seen[ds]; ok && v == vers[ds] && !full {
			continue
		}
		st, err := f.ctl.State(ctx, ds)
		if err != nil {
			continue
		}
		f.seen[ds] = vers[ds]
		f.apply(ds, st)
	}
}

// apply sets ds's layers to the modes st gives.
func (f *follower) apply(ds string, st control.State) {
	f.smu.Lock()
	f.state[ds] = st
	f.smu.Unlock()
	for _, lm := range f.modes[ds] {
		m := st.ModeOf(lm.Name, lm.Configured)
		lm.Var.Store(m)
		if f.m != nil {
			f.m(ds, lm.Name, m == limiters.Shadow)
		}
	}
}

// stateOf is ds's runtime state as last read (the zero State before).
func (f *follower) stateOf(ds string) control.State {
	if f == nil {
		return control.State{}
	}
	f.smu.Lock()
	defer f.smu.Unlock()
	return f.state[ds]
}

// newFollower follows the downstreams with admission modes or a shaping
// rate (for predictions); nil when there are none.
func (p *Producer) newFollower(ctl *control.Store) *follower {
	f := &follower{ctl: ctl, every: p.cfg.ControlInterval, modes: map[string][]LimiterMode{}, seen: map[string]string{},
		state: map[string]control.State{}}
	if f.every <= 0 {
		f.every = DefaultControlInterval
	}
	names := map[string]bool{}
	for ds, a := range p.cfg.Admission {
		if len(a.Modes) > 0 {
			f.modes[ds] = a.Modes
			names[ds] = true
		}
	}
	for ds := range p.cfg.Shaping {
		names[ds] = true
	}
	if len(names) == 0 {
		return nil
	}
	for ds := range names {
		f.names = append(f.names, ds)
	}
	if p.m != nil {
		f.m = func(ds, limiter string, shadow bool) {
			v := 0.0
			if shadow {
				v = 1
			}
			p.m.ShadowLimiter.WithLabelValues(ds, limiter).Set(v)
		}
		for ds, lms := range f.modes {
			for _, lm := range lms {
				f.m(ds, lm.Name, lm.Var.Load() == limiters.Shadow)
			}
		}
	}
	return f
}

// shadowDecisions counts the decisions of the layers in shadow: what they
// would have done, as the real decisions count (a rejection under a Defer
// policy would have been a deferral).
func (p *Producer) shadowDecisions(ds string, adm Admission, res limiters.Result) {
	if p.m == nil {
		return
	}
	for _, d := range res.Shadow {
		o := d.Outcome()
		if o == "rejected" && adm.OnReject == Defer {
			o = "deferred"
		}
		p.m.ShadowDecisions.WithLabelValues(ds, d.Name, o).Inc()
	}
}
