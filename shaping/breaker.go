package shaping

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shaper-io/shaper/internal/breakerspec"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/metrics"
	"github.com/shaper-io/shaper/limiters"
)

// Breaker is a downstream's circuit breaker, beside its rate and shared by
// every process through Redis. The rate protects the downstream from us;
// the breaker protects us while it is down. Closed, it counts the calls'
// outcomes over a sliding Window: once the window holds MinCalls calls and
// errors (5xx, timeouts, connection failures: Decision.Outage; never a
// 4xx or a throttle) reach ErrorRatio of them, it opens and nothing is
// released for Cooldown. Then it is half-open: probes go out at
// ProbeRate, across every process; Probes successes in a row close it, a
// failure reopens it for twice the last cool-down, at most MaxCooldown.
//
// Tasks wait meanwhile without consuming an attempt or being archived: a
// worker's task waits for a slot as under a pause, the rest stay in the
// queue. A task whose call failed the way an outage does waits, in place,
// for the breaker's verdict (up to the time MinCalls calls take at the
// rate, at most the Window): if the breaker opens, the failure was the
// outage's and the task waits for it to close; if not, it is retried (or
// archived) as any failure.
//
// Its fields and defaults are documented in internal/breakerspec, where
// the config's validation shares them: zero fields mean 0.5 over 10s with
// at least 20 calls, 5s cool-down doubling up to 2m, probes at 1/s, 3 to
// close.
type Breaker = breakerspec.Spec

// validateBreaker reports thresholds that are out of range or contradict
// each other or the downstream's rate, naming the field and the value.
func validateBreaker(b *Breaker, rate limiters.Limit) error {
	if p := b.Filled().Check(rate); p != nil {
		return p.Under("breaker", "Breaker")
	}
	return nil
}

// BreakerMode is a breaker's state.
type BreakerMode int

// The breaker's states.
const (
	BreakerClosed   BreakerMode = lua.BreakerClosed   // releases go at the rate
	BreakerOpen     BreakerMode = lua.BreakerOpen     // nothing is released
	BreakerHalfOpen BreakerMode = lua.BreakerHalfOpen // probes go at the probe rate
)

// String is "closed", "open" or "half_open" (the metric's label).
func (m BreakerMode) String() string {
	switch m {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half_open"
	}
	return fmt.Sprintf("BreakerMode(%d)", int(m))
}

// BreakerStatus is a downstream's breaker as this process last saw it.
type BreakerStatus struct {
	// Mode is the state; BreakerClosed for a downstream without a breaker.
	Mode BreakerMode
	// Since is when the state began, on the Redis clock (zero: closed
	// since its key expired, or never opened).
	Since time.Time
	// Until is when an open breaker's cool-down ends (zero otherwise).
	Until time.Time
}

// Batching of outcome reports: an outcome that may open or move the
// breaker (an error, a probe's) goes within brkFast, together with the
// successes pending; successes alone wait up to a tenth of the window
// (within [brkFast, brkSlow]), so a healthy downstream costs about one
// script call per second per process.
const (
	brkFast = 100 * time.Millisecond
	brkSlow = time.Second
)

// breaker is a downstream's breaker in this process: a mirror of the
// shared state, the batch of outcomes not yet reported, and the lane's
// gate.
type breaker struct {
	env  breakerEnv
	spec breakerspec.Spec
	key  string
	kick chan struct{}

	mu      sync.Mutex
	mode    BreakerMode
	since   int64 // µs on the Redis clock
	until   int64
	seq     uint64        // bumped on every change this process sees
	changed chan struct{} // closed on a change
	pending map[brkToken]*brkCount
	urgent  bool
	lastLog time.Time
}

// brkToken is what a release carries: the state it was released in (a
// probe's half-open spell, or closed) and the mirror's seq then.
type brkToken struct {
	probe bool
	since int64
	seq   uint64
}

type brkCount struct{ calls, errs int64 }

// breakerEnv is what a breaker needs of its downstream and dispatcher,
// handed over when it is made: it reaches into neither.
type breakerEnv struct {
	name     string // the downstream's
	clock    Clock
	offset   *clockOffset                    // the downstream's bucket clock offset
	rate     *atomic.Pointer[limiters.Limit] // the rate in force
	store    *lua.Store
	state    func(ctx context.Context) ([]any, error) // the shared state: st, since, until
	announce func(ctx context.Context) error          // a move, to every process
	m        *metrics.Metrics
	log      *slog.Logger
	timeout  time.Duration // of one Redis call
	tick     time.Duration // the control loop's
	stopping <-chan struct{}
}

func newBreaker(spec *Breaker, key string, env breakerEnv) *breaker {
	return &breaker{env: env, spec: spec.Filled(), key: key, kick: make(chan struct{}, 1),
		changed: make(chan struct{}), pending: map[brkToken]*brkCount{}}
}

func (b *breaker) args() lua.BreakerArgs {
	us := func(d time.Duration) int64 { return max(int64(d/time.Microsecond), 1) }
	return lua.BreakerArgs{Window: us(b.spec.Window), MinCalls: int64(b.spec.MinCalls), RatioPPM: max(b.spec.RatioPPM(), 1),
		Cooldown: us(b.spec.Cooldown), MaxCooldown: us(b.spec.MaxCooldown), ProbeInterval: us(b.spec.ProbeRate.Interval(1)),
		Probes: int64(b.spec.Probes)}
}

// apply takes a state read from Redis into the mirror; moved says this
// process made the transition (counted, logged and announced).
func (b *breaker) apply(mode BreakerMode, since, until int64, moved bool) {
	b.mu.Lock()
	// A closed breaker whose key expired reads as closed since 0: the same
	// state, not a change.
	changed := mode != b.mode || mode != BreakerClosed && since != b.since
	b.mode, b.since, b.until = mode, since, until
	if changed {
		b.seq++
		close(b.changed)
		b.changed = make(chan struct{})
	}
	b.mu.Unlock()
	e := b.env
	if m := e.m; m != nil {
		m.BreakerState.WithLabelValues(e.name).Set(float64(mode))
		if moved {
			m.BreakerMoves.WithLabelValues(e.name, mode.String()).Inc()
		}
	}
	if !moved {
		return
	}
	e.log.Info("shaping: circuit breaker "+mode.String(), "downstream", e.name)
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	if err := e.announce(ctx); err != nil {
		e.log.Warn("shaping: breaker announce failed", "downstream", e.name, "err", err)
	}
}

func (b *breaker) applyReply(rep lua.BreakerReply) {
	b.apply(BreakerMode(rep.State), rep.Since, rep.Until, rep.Moved)
}

// refresh re-reads the shared state (the control loop calls it when the
// downstream's version moved, and every fullRefresh).
func (b *breaker) refresh(ctx context.Context) error {
	v, err := b.env.state(ctx)
	if err != nil {
		return err
	}
	b.apply(BreakerMode(toInt(v[0])), toInt(v[1]), toInt(v[2]), false)
	return nil
}

// toInt is v (a Redis reply's string) as an integer; 0 when it is not one.
func toInt(v any) int64 {
	s, ok := v.(string)
	if !ok {
		return 0
	}
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// status is the mirror as a BreakerStatus.
func (b *breaker) status() BreakerStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := BreakerStatus{Mode: b.mode}
	if b.since > 0 {
		s.Since = time.UnixMicro(b.since)
	}
	if b.mode == BreakerOpen && b.until > 0 {
		s.Until = time.UnixMicro(b.until)
	}
	return s
}

// claim is the token of a release whose slot was granted at seq; false
// when the breaker changed since (the slot is wasted, never used).
func (b *breaker) claim(seq uint64) (brkToken, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if seq != b.seq || b.mode == BreakerOpen {
		return brkToken{}, false
	}
	return brkToken{probe: b.mode == BreakerHalfOpen, since: b.since, seq: seq}, true
}

// current is the mirror's seq, taken before a reservation: the slots it
// grants are valid only while it holds.
func (b *breaker) current() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seq
}
