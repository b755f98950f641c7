package shaping

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A downstream's gates, as one chain. The take asks every gate in order
// without waiting (takeGate): the operator's pause, an open circuit
// breaker and a hold the downstream announced (a pushback); nothing
// leaves the queue while one is shut. A
// task already taken waits at the first two (releaseGate), and the
// breaker's leave makes its call a probe when half open. A task's own
// deadline is the last gate, checked wherever it waits (expire,
// dropExpired). The chain is built once per downstream from its
// settings: a downstream without a breaker has no breaker gate.

// gate is one link of the take's chain: whether it is open at local time
// and, when shut, until when (local clock).
type gate func(local time.Time) (until time.Time, open bool)

// gateChain is a downstream's take gates, in order: pause, breaker (when
// configured), pushback. A long hold in the bucket (a spent quota, an
// announced limit with nothing left) needs no gate: the take's own
// reservation finds it, moves nothing, and says when to take again.
type gateChain []gate

// shut returns until when the first gate shut at local stays shut, and
// whether one is.
func (c gateChain) shut(local time.Time) (time.Time, bool) {
	for _, g := range c {
		if until, open := g(local); !open {
			return until, true
		}
	}
	return time.Time{}, false
}

// gateRecheck is how often a closed gate is asked again when no wake
// comes (a wake comes with every control change this process sees).
const gateRecheck = 250 * time.Millisecond

// takeGates builds r's chain from its settings.
func (r *runner) takeGates() gateChain {
	c := gateChain{func(local time.Time) (time.Time, bool) { // the pause
		return local.Add(gateRecheck), r.pause.gate() == nil
	}}
	if r.brk != nil {
		c = append(c, func(local time.Time) (time.Time, bool) { // an open breaker
			if st := r.brk.status(); st.Mode == BreakerOpen && !st.Until.IsZero() {
				if until := st.Until.Add(r.offset.get()); until.After(local) {
					return until, false
				}
			}
			return time.Time{}, true
		})
	}
	return append(c,
		func(local time.Time) (time.Time, bool) { // a pushback
			// the downstream asked to wait until then: take when the last
			// MaxWait before it starts, so the first slots after it are used
			if us := r.push.until.Load(); us > 0 {
				if at := time.UnixMicro(us).Add(r.offset.get()).Add(-r.ds.MaxWait); at.After(local) {
					return at, false
				}
			}
			return time.Time{}, true
		})
}

// takeGate says when the engine may take r's tasks (zero: now; now is the
// engine's clock): at the first shut gate's end, asked again at least
// every gateRecheck.
func (r *runner) takeGate(now time.Time) time.Time {
	local := r.d.cfg.Clock.Now()
	until, shut := r.gates.shut(local)
	if !shut {
		return time.Time{}
	}
	return now.Add(min(until.Sub(local), gateRecheck))
}

// passage is what the pause and the breaker say to a release: it may go
// (ok; seq is the breaker's spell, probe a half-open breaker's probe),
// or it waits for resumed (closed at a resume) or for wait or changed (an
// open breaker's cool-down, or its next probe).
type passage struct {
	ok      bool
	seq     uint64
	probe   bool
	resumed <-chan struct{}
	wait    time.Duration
	changed <-chan struct{}
}

// releaseGate asks the pause, then the breaker (which may call Redis for a
// half-open probe's leave).
func (r *runner) releaseGate() passage {
	if ch := r.pause.gate(); ch != nil {
		return passage{resumed: ch}
	}
	if b := r.brk; b != nil {
		g := b.gate()
		if !g.ok {
			return passage{wait: g.wait, changed: g.changed}
		}
		return passage{ok: true, seq: g.seq, probe: g.probe}
	}
	return passage{ok: true}
}

// await waits until a shut passage may have opened; false when ctx ends
// or the dispatcher stops.
func (r *runner) await(ctx context.Context, p passage) bool {
	var timeout <-chan time.Time
	if p.resumed == nil {
		t := r.d.cfg.Clock.NewTimer(p.wait)
		defer t.Stop()
		timeout = t.C()
	}
	select {
	case <-p.resumed:
	case <-timeout:
	case <-p.changed:
	case <-ctx.Done():
		return false
	case <-r.d.stopping:
		return false
	}
	return true
}

// pauseSwitch is the operator's pause of one downstream in this process.
type pauseSwitch struct {
	mu      sync.Mutex
	paused  bool
	resumed chan struct{} // closed when not paused
	sig     chan struct{} // closed while paused (nil before the first pause)
}

func newPauseSwitch() pauseSwitch { return pauseSwitch{resumed: make(chan struct{})} }

func (p *pauseSwitch) set(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on == p.paused {
		return
	}
	p.paused = on
	if on {
		p.resumed = make(chan struct{})
		if p.sig == nil {
			p.sig = make(chan struct{})
		}
		close(p.sig)
	} else {
		close(p.resumed)
		p.sig = make(chan struct{})
	}
}

// signal returns a channel closed while paused: a task waiting for its
// slot under the engine selects on it and is given back, so a paused
// downstream holds no task.
func (p *pauseSwitch) signal() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sig == nil {
		p.sig = make(chan struct{})
	}
	return p.sig
}

// gate returns nil when not paused, else a channel closed on resume.
func (p *pauseSwitch) gate() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.paused {
		return nil
	}
	return p.resumed
}

// pushbacks is what this process knows of the holds a downstream
// announced (Retry-After, a refusal): until is the furthest next_free it
// pushed to (µs, Redis clock), so a slot before it was reserved before the
// pushback; bare counts refusals in a row that gave no wait.
type pushbacks struct {
	until atomic.Int64
	bare  atomic.Int64
}

// pushed records that next_free was pushed to nf (Redis clock).
func (p *pushbacks) pushed(nf time.Time) {
	us := nf.UnixMicro()
	for {
		cur := p.until.Load()
		if us <= cur || p.until.CompareAndSwap(cur, us) {
			return
		}
	}
}

// before reports whether a slot (Redis clock) was reserved before a
// pushback of this process that reaches past it.
func (p *pushbacks) before(slot time.Time) bool {
	return slot.UnixMicro() < p.until.Load()
}

// maxBareBackoff bounds the backoff of bare refusals in a row.
const maxBareBackoff = time.Minute

// bareBackoff is the pause after a refusal that gave no wait: base, then
// doubled for each bare refusal in a row (up to maxBareBackoff), so a
// downstream that answers a bare 429 forever gets ever fewer calls.
func (p *pushbacks) bareBackoff(base time.Duration) time.Duration {
	n := min(p.bare.Add(1)-1, 16)
	return min(base<<n, max(maxBareBackoff, base))
}
