package shaping

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/clock"
	"github.com/shaper-io/shaper/internal/fairindex"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/metrics"
	"github.com/shaper-io/shaper/limiters"
)

// Dispatcher releases the tasks of its downstreams at their rates.
// The zero Dispatcher is not usable: New builds one.
type Dispatcher struct {
	*services

	mu       sync.Mutex
	runners  map[string]*runner
	order    []string
	started  bool
	stopOnce sync.Once
	loops    sync.WaitGroup // the background loops (spawn), which end on stopping
	engStop  func()         // ends the engine's Run
	engDone  chan struct{}  // closed when the engine's Run returned
	pid      string         // this process in the liveness ZSET
}

// New returns a Dispatcher over rdb. Add downstreams, then Start or Run.
func New(rdb redis.UniversalClient, cfg Config) *Dispatcher {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 10 * time.Second
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.ForwardInterval <= 0 {
		cfg.ForwardInterval = 5 * time.Second
	}
	if cfg.RedisTimeout <= 0 {
		cfg.RedisTimeout = 2 * time.Second
	}
	if cfg.ControlInterval <= 0 {
		cfg.ControlInterval = 250 * time.Millisecond
	}
	if cfg.ControlPoll <= 0 {
		cfg.ControlPoll = 2 * time.Second
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.RecoverAfter <= 0 {
		cfg.RecoverAfter = 7 * time.Second
	}
	cfg.RecoverAfter = max(cfg.RecoverAfter, 6*time.Second)
	d := &Dispatcher{
		services: &services{rdb: rdb, store: lua.New(rdb), cfg: cfg, space: keys.New(cfg.Prefix), log: cfg.Logger,
			stopping: make(chan struct{}), notices: make(chan struct{}, 1), fleet: make(chan struct{}, 1)},
		runners: map[string]*runner{}, pid: keys.ProcessMember(newProcessID()),
	}
	d.m = metrics.New(cfg.Registerer)
	d.alog = &logThrottle{every: asynqLogEvery, last: map[string]time.Time{}, dropped: map[string]int{}}
	d.control = NewControl(rdb, cfg.Prefix)
	d.control.served = d.served
	d.fair = NewFairQueue(rdb, cfg.Prefix)
	d.buckets = NewBuckets(rdb, cfg.Prefix, WithTimeout(cfg.RedisTimeout),
		WithObserver(func(dur time.Duration, err error) { d.m.ObserveScript("shaping", dur, err) }))
	return d
}

// Control is the dispatcher's runtime control (pause, resume, rate
// override), which applies to every process sharing the Redis.
func (d *Dispatcher) Control() *Control { return d.control }

// Buckets is the dispatcher's bucket client (for pushbacks from outside a
// handler, and for inspection).
func (d *Dispatcher) Buckets() *Buckets { return d.buckets }

// Add registers a downstream. It must be called before Start.
func (d *Dispatcher) Add(ds Downstream) error {
	if err := ds.prepare(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started {
		return fmt.Errorf("shaping: Add(%q) after Start", ds.Name)
	}
	if _, dup := d.runners[ds.Name]; dup {
		return fmt.Errorf("shaping: downstream %q added twice", ds.Name)
	}
	if ds.Fairness != nil {
		// its own copy, holding the key controls the control loop reads
		f := *ds.Fairness
		f.Runtime = &fairindex.KeyOverrides{}
		ds.Fairness = &f
	}
	r := &runner{d: d.services, ds: ds, handlers: map[string]HandlerFunc{}, pause: newPauseSwitch()}
	r.lane = newLane(r)
	if ds.Concurrency > 0 || ds.KeyConcurrency > 0 {
		r.leases = newLeaseLane(d.services, ds)
	}
	if ds.Breaker != nil {
		key := d.space.Breaker(ds.Name)
		r.brk = newBreaker(ds.Breaker, key, breakerEnv{name: ds.Name, clock: d.cfg.Clock, offset: &r.offset, rate: &r.rate,
			store: d.store, m: d.m, log: d.log, timeout: d.cfg.RedisTimeout, tick: d.cfg.ControlInterval, stopping: d.stopping,
			state: func(ctx context.Context) ([]any, error) {
				return d.control.st.Cmd().HMGet(ctx, key, "st", "since", "until").Result()
			},
			announce: func(ctx context.Context) error { return d.control.bump(ctx, ds.Name) }})
	}
	r.gates = r.takeGates()
	lim := ds.Rate
	r.rate.Store(&lim)
	r.applied.base.Store(&lim)
	d.runners[ds.Name] = r
	d.order = append(d.order, ds.Name)
	if d.m != nil {
		d.m.RateInForce.WithLabelValues(ds.Name).Set(ds.Rate.PerSec())
		d.m.Paused.WithLabelValues(ds.Name).Set(0)
		d.m.ConcurrencyLimit.WithLabelValues(ds.Name).Set(float64(ds.Concurrency))
		if ds.Breaker != nil {
			d.m.BreakerState.WithLabelValues(ds.Name).Set(0)
		}
	}
	return nil
}

// Handle sets the handler of one task type on a downstream.
func (d *Dispatcher) Handle(downstream, taskType string, h HandlerFunc) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.runners[downstream]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownDownstream, downstream)
	}
	if d.started {
		return fmt.Errorf("shaping: Handle(%q, %q) after Start", downstream, taskType)
	}
	r.handlers[taskType] = h
	return nil
}

// Start starts every downstream's workers and returns.
func (d *Dispatcher) Start() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started {
		return errors.New("shaping: already started")
	}
	if len(d.runners) == 0 {
		return errors.New("shaping: no downstreams")
	}
	d.started = true
	for _, r := range d.runners {
		if r.ds.Batch == nil && d.eng == nil {
			eng, err := d.newEngine()
			if err != nil {
				return err
			}
			d.eng = eng
		}
	}
	// the first scan before asynq's recoverer first runs
	q := newQuarantine(d.cfg.Quarantine, d.order, quarantineEnv{rdb: d.rdb, store: d.store, space: d.space, log: d.log,
		m: d.m, timeout: d.cfg.RedisTimeout, stopping: d.stopping})
	d.spawn(q.loop)
	dss := make([]Downstream, 0, len(d.order))
	for _, name := range d.order {
		dss = append(dss, d.runners[name].ds)
	}
	upgradeLayout(d.rdb, d.space, dss, d.cfg.RedisTimeout, d.log)
	for _, name := range d.order {
		r := d.runners[name]
		ctx, cancel := context.WithTimeout(context.Background(), d.cfg.RedisTimeout)
		if !r.refresh(ctx) {
			r.apply()
		}
		cancel()
		r.seedOffset()
		if r.ds.Fairness != nil {
			r.ensureKeyRates() // before its first take (which gives every key the slowest ceiling without)
		}
		if err := d.serveQueue(r, q); err != nil {
			return fmt.Errorf("shaping: start %q: %w", name, err)
		}
		d.spawn(r.lane.run)
		if r.ds.Fairness != nil {
			d.spawn(r.feed)
		}
		if r.brk != nil {
			d.spawn(r.brk.run)
		}
		if r.leases != nil {
			d.spawn(r.leases.run)
			d.spawn(r.leases.renewLoop)
		}
	}
	if d.eng != nil {
		ctx, stop := context.WithCancel(context.Background())
		d.engStop, d.engDone = stop, make(chan struct{})
		go func() { defer close(d.engDone); d.eng.Run(ctx) }()
	}
	runners := make([]*runner, 0, len(d.order))
	for _, name := range d.order {
		runners = append(runners, d.runners[name])
	}
	d.spawn(func() { d.controlLoop(runners) })
	lv := &liveness{rdb: d.rdb, store: d.store, space: d.space, pid: d.pid, clock: d.cfg.Clock, timeout: d.cfg.RedisTimeout,
		recoverAfter: d.cfg.RecoverAfter, log: d.log, m: d.m, trouble: &d.trouble, procs: &d.procs, fleet: d.fleet, stopping: d.stopping}
	names := slices.Clone(d.order)
	d.spawn(func() { lv.loop(names) })
	return nil
}

// spawn runs loop in the background; Shutdown waits for it to end.
func (d *Dispatcher) spawn(loop func()) {
	d.loops.Add(1)
	go func() {
		defer d.loops.Done()
		loop()
	}()
}

// loopsGrace bounds how long Shutdown waits for the background loops past
// the stop: one Redis call each at most (Config.RedisTimeout) and a margin.
func (d *Dispatcher) loopsGrace() time.Duration { return d.cfg.RedisTimeout + time.Second }

// Shutdown stops taking tasks, lets releases in flight finish for up to
// Config.ShutdownTimeout (or until ctx ends), and returns every task still
// waiting for its slot to the front of its queue without consuming an
// attempt. Slots those tasks had reserved are wasted, never replayed.
func (d *Dispatcher) Shutdown(ctx context.Context) error {
	d.mu.Lock()
	started := d.started
	runners := make([]*runner, 0, len(d.order))
	for _, n := range d.order {
		runners = append(runners, d.runners[n])
	}
	d.mu.Unlock()
	if !started {
		return nil
	}
	d.stopOnce.Do(func() { close(d.stopping) })
	// Stop waits for each processor's current poll sleep (up to 1.5 ×
	// PollInterval): stop them all at once, not one after another.
	var stops sync.WaitGroup
	if d.engStop != nil {
		d.engStop() // no more takes; tasks waiting for a slot are given back
	}
	for _, r := range runners {
		if r.srv != nil {
			stops.Add(1)
			go func() { defer stops.Done(); r.srv.Stop() }()
		}
	}
	stops.Wait()
	deadline := time.NewTimer(d.cfg.ShutdownTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var err error
wait:
	for {
		busy := int64(0)
		for _, r := range runners {
			busy += r.releasing.Load()
		}
		if busy == 0 {
			break
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			err = fmt.Errorf("shaping: %d releases still running after %s; their tasks go back to the queue", busy, d.cfg.ShutdownTimeout)
			break wait
		case <-ctx.Done():
			err = ctx.Err()
			break wait
		}
	}
	var wg sync.WaitGroup
	for _, r := range runners {
		if r.srv != nil {
			wg.Add(1)
			go func() { defer wg.Done(); r.srv.Shutdown() }()
		}
	}
	if d.engDone != nil {
		wg.Go(func() { <-d.engDone }) // calls still running are cut at the engine's ShutdownTimeout
	}
	wg.Wait()
	// nothing of the dispatcher runs (or logs) once Shutdown returns: a
	// liveness scan that logged after Run had returned raced a test's
	// read of the log
	ended := make(chan struct{})
	go func() { d.loops.Wait(); close(ended) }()
	grace := time.NewTimer(d.loopsGrace())
	defer grace.Stop()
	select {
	case <-ended:
	case <-grace.C:
		d.log.Warn("shaping: background loops still running after shutdown", "waited", d.loopsGrace())
	}
	return err
}

// Run starts the dispatcher, waits for ctx to end, and shuts down.
func (d *Dispatcher) Run(ctx context.Context) error {
	if err := d.Start(); err != nil {
		return err
	}
	<-ctx.Done()
	return d.Shutdown(context.Background())
}

// Rate is the rate in force for a downstream in this process.
func (d *Dispatcher) Rate(downstream string) (limiters.Limit, error) {
	r, err := d.runner(downstream)
	if err != nil {
		return limiters.Limit{}, err
	}
	return *r.rate.Load(), nil
}

// Paused reports whether a downstream is paused in this process.
func (d *Dispatcher) Paused(downstream string) (bool, error) {
	r, err := d.runner(downstream)
	if err != nil {
		return false, err
	}
	return r.pause.gate() != nil, nil
}

// State is a downstream's runtime state as this process last read it from
// Redis (at most ControlInterval old after a change, fullRefresh
// otherwise), without a Redis call: for status pages that sample often.
func (d *Dispatcher) State(downstream string) (State, error) {
	r, err := d.runner(downstream)
	if err != nil {
		return State{}, err
	}
	r.smu.Lock()
	defer r.smu.Unlock()
	return r.st, nil
}

// Breaker is a downstream's circuit breaker as this process last saw it
// (BreakerClosed for one without a breaker), without a Redis call.
func (d *Dispatcher) Breaker(downstream string) (BreakerStatus, error) {
	r, err := d.runner(downstream)
	if err != nil || r.brk == nil {
		return BreakerStatus{}, err
	}
	return r.brk.status(), nil
}

// Downstreams lists the downstreams in the order they were added.
func (d *Dispatcher) Downstreams() []Downstream {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Downstream, 0, len(d.order))
	for _, n := range d.order {
		ds := d.runners[n].ds
		ds.Rate = *d.runners[n].rate.Load()
		out = append(out, ds)
	}
	return out
}

func (d *Dispatcher) runner(name string) (*runner, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.runners[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownDownstream, name)
	}
	return r, nil
}

// served is the downstream called name as the dispatcher runs it
// (defaults filled); false when it does not serve one of that name.
func (d *Dispatcher) served(name string) (Downstream, bool) {
	r, err := d.runner(name)
	if err != nil {
		return Downstream{}, false
	}
	return r.ds, true
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

// Mode is the mode a downstream's shaping runs in now in this process.
func (d *Dispatcher) Mode(downstream string) (limiters.Mode, error) {
	r, err := d.runner(downstream)
	if err != nil {
		return limiters.Enforce, err
	}
	if r.inShadow() {
		return limiters.Shadow, nil
	}
	return limiters.Enforce, nil
}
