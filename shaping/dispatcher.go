package shaping

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/clock"
	"github.com/shaper-io/shaper/internal/fairindex"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/metrics"
	"github.com/shaper-io/shaper/internal/rlheader"
	"github.com/shaper-io/shaper/internal/sizing"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/shaping/take"
)

// Task is what a handler receives.
type Task struct {
	// ID is the task's asynq ID (its UniqueKey, when the producer set one).
	ID string
	// Type is the asynq task type (queue.DefaultType unless set;
	// BatchType for a batch).
	Type string
	// Payload is delivered as the producer enqueued it.
	Payload []byte
	// Headers are the task's asynq headers (shaper's envelope included).
	Headers map[string]string
	// Downstream is the downstream the task was released to.
	Downstream string
	Key        string // admission key, if the producer gave one
	Cost       int64  // units the task occupied in the bucket
	Retried    int    // failed attempts before this one
	// Slot is the reserved slot's time on the Redis clock; the handler runs
	// at or just after it.
	Slot time.Time
	// Deadline is the latest time the task could start (the producer's
	// Task.Deadline or TTL); zero when it has none. A handler runs at or
	// before it; a task that could not is archived unsent.
	Deadline time.Time

	seq    int64  // the bucket's issued count just after this task's units
	answer answer // what the handler reported (ReportCost, ReportHeader)
}

// HandlerFunc delivers a task to its downstream. A nil error completes the
// task; a ThrottledError pushes the bucket back and retries without
// consuming an attempt; an error wrapping ErrPermanent or asynq.SkipRetry
// archives the task; any other error is retried with asynq's backoff. A
// panic archives the task with the panic's message.
type HandlerFunc func(ctx context.Context, t *Task) error

// Downstream is one protected destination and how fast it may be called.
type Downstream struct {
	// Name: 1-64 of [A-Za-z0-9_.-]. Its queue is "<prefix>:<name>".
	Name string
	// Rate is the release rate: Rate.Rate units per Rate.Period, required.
	// Only those two fields are read; Rate.Burst is ignored whatever its
	// value (limiters.PerSecond sets it; it means nothing here): the
	// downstream's burst is Burst.
	Rate limiters.Limit
	// Burst lets this many releases through back to back after an idle
	// spell; 0 (the zero value) or 1 spaces every release by 1/rate.
	Burst int64
	// MaxWait is the longest a worker holds a task for its slot; the
	// bucket holds MaxWait × rate tasks. Zero means 1s.
	MaxWait time.Duration
	// MaxCost is the largest cost one task may carry; a larger one is
	// archived at release with ErrCostExceedsCapacity (producers built
	// from the same config refuse it at enqueue). Zero means
	// DefaultMaxCost: what the bucket holds, rate × MaxWait (or Burst),
	// at least 1. A batch may cost MaxCost × Batch.MaxRows. Its interval
	// at the rate must be within MaxInterval.
	MaxCost int64
	// RateHeaders read limits the downstream announces in fields of its
	// own (rlheader.Mapping, or a vendor's rlheader.Profile), beside the
	// standard ones.
	RateHeaders []rlheader.Mapping
	// MaxHold is the longest one answer of the downstream may hold it: an
	// announced reset, a Retry-After or a reported cost further ahead is
	// cut to it (logged and counted). The quotas in Quotas are not cut.
	// Zero means DefaultMaxHold; at most MaxInterval.
	MaxHold time.Duration
	// Concurrency caps the calls in flight to the downstream across every
	// process sharing the Redis (a system that takes N calls at a time);
	// 0 means no cap. A release needs a lease and a slot: a worker waits
	// for a lease (holding no retry attempt) and keeps it for its call.
	Concurrency int
	// KeyConcurrency caps the calls in flight per admission key (the
	// task's Key) across every process; 0 means no cap. A key at its cap
	// does not hold up the other keys' tasks.
	KeyConcurrency int
	// LeaseTime is how long a lease lives unless renewed (a call renews
	// it every third of it), so a crashed process's leases are free again
	// within it. Zero means DefaultLeaseTime; at least 1s.
	LeaseTime time.Duration
	// Workers is this downstream's worker budget in this process: the
	// most tasks it holds (waiting for a slot or in a call). A FIFO
	// downstream takes only what keeps 200ms of releases waiting, so it
	// holds about that and its calls in flight, far fewer.
	// Zero means DefaultWorkers: ceil(rate × MaxWait) + 1.
	Workers int
	// Handler serves task types without a handler of their own (Handle).
	Handler HandlerFunc
	// LateTolerance is how far behind its slot a worker may still release;
	// a worker woken later than that (a starved CPU, a GC pause) wastes
	// the slot and queues again rather than bunch up with the next
	// releases. Zero means half the task's slot (cost/rate), at least 5ms;
	// negative means never skip.
	LateTolerance time.Duration
	// Schedule, when set, changes the rate at times of day; Rate is used
	// until one of its changes has fired.
	Schedule RateSchedule
	// Adaptive, when set, lets the downstream's answers move the rate
	// between a floor and a ceiling (AIMD), shared by all processes.
	Adaptive *Adaptive
	// Fairness, when set, shares the rate among the admission keys with
	// tasks waiting (weighted fair share; see Fairness). Producers must
	// enqueue through queue.ProducerConfig.Fair for it.
	Fairness *Fairness
	// Quotas are budgets the releases never pass beside the rate (5,000
	// an hour, 100,000 a day), checked in the reservation's script call;
	// a release needs room in each. See Quota.
	Quotas []Quota
	// Priority, when set, serves the downstream's tasks by priority (1
	// first, 5 last, 3 by default; see queue.Task.Priority): a waiting
	// task of a higher priority is always taken before one of a lower
	// priority, under every limit, since the take picks it. Producers
	// must enqueue through queue.ProducerConfig.Priority for it. Not with
	// Batch.
	Priority *Priority
	// Batch, when set, aggregates the downstream's tasks into batches
	// before shaping (the producer must enqueue them with Batched: see
	// queue.ProducerConfig.Batched). Handlers receive BatchType tasks
	// whose payload DecodeBatch reads.
	Batch *Batch
	// Breaker, when set, stops releases while the downstream is down
	// (a ratio of 5xx, timeouts and connection failures), shared by
	// every process; see Breaker.
	Breaker *Breaker
	// ShapingMode is the mode the downstream's shaping starts in: Enforce
	// (the zero value) or Shadow, where every task reserves its slot (so
	// shaper_shaping_shadow_wait_seconds is the wait enforcing would have
	// given) and is released at once. Control.SetMode changes it at
	// runtime in every process. A Breaker holds in shadow too.
	ShapingMode limiters.Mode
}

// Config configures a Dispatcher. The zero value works.
type Config struct {
	// Prefix is the key prefix of buckets and queues; "" means "shaper".
	Prefix string
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Registerer is where the dispatcher registers its Prometheus
	// collectors (shaper_shaping_*, shaper_redis_*, shaper_queue_*: see
	// docs/operations.md); nil records nothing. Collectors that are
	// already registered there with the same description (by a Producer
	// or another Dispatcher given the same Registerer) are shared, not
	// registered twice.
	Registerer prometheus.Registerer
	// ShutdownTimeout bounds how long Shutdown lets releases in flight
	// finish; zero means 10s. Tasks still waiting for their slot go back
	// to the queue at once.
	ShutdownTimeout time.Duration
	// PollInterval is how often an idle downstream looks for new tasks
	// when its queue is empty (one LLEN); zero means 1s, asynq's
	// TaskCheckInterval. A queue that just emptied is looked at sooner,
	// backing off to it. It is the idle cost's largest part against the
	// delay of a task that arrives at an empty queue from another process
	// (up to PollInterval); see docs/operations.md. With a backlog there
	// is no polling.
	PollInterval time.Duration
	// ForwardInterval is how often scheduled, deferred and retried tasks
	// that have come due move to the queue, and tasks under an expired
	// lease are recovered (one script call of 5 commands, in place of a
	// poll); zero means 5s, asynq's DelayedTaskCheckInterval.
	ForwardInterval time.Duration
	// RedisTimeout bounds each bucket script call; zero means 2s.
	RedisTimeout time.Duration
	// ControlInterval is how often the dispatcher looks for runtime state
	// changes (pause, rate override, adaptive rate; one Redis command for
	// all downstreams) and applies the schedules; zero means 250ms, so a
	// change reaches every process within a second.
	ControlInterval time.Duration
	// RecoverAfter is how long a process may go without announcing itself
	// (every 2s) and without extending its tasks' leases (every 2s) before
	// the others return the tasks it held to the front of their queues;
	// zero means 7s (three extensions missed), so a dead process's tasks
	// are back within 10s. Each held task is delivered at least once: a process
	// stalled (not dead) for longer may deliver a task another process
	// also delivers, so handlers send Idempotency-Key (the http handler
	// does). Must be at least 6s (one lease extension plus margin).
	RecoverAfter time.Duration
	// Clock is this process's clock: schedules are read at Clock.Now, and
	// the release path, the control loop and the liveness loop wait on its
	// timers (slots stay on the Redis clock). A clock other than
	// clock.Real also dates the adaptive rate's increases and decreases in
	// its script (instead of Redis TIME), so a test steps AIMD by
	// advancing it. Nil (the zero value) means clock.Real; tests pass a
	// fake one (see Clock).
	Clock Clock
	// Quarantine tunes the scan for corrupt queue entries (quarantine.go).
	Quarantine QuarantineConfig
}

// Dispatcher releases the tasks of its downstreams at their rates.
// The zero Dispatcher is not usable: New builds one.
type Dispatcher struct {
	rdb     redis.UniversalClient
	store   *lua.Store // recovery, quarantine and breaker scripts
	cfg     Config
	space   keys.Space
	buckets *Buckets
	fair    *FairQueue
	log     *slog.Logger
	alog    *logThrottle // asynq's repeated warnings, shared by every server
	m       *metrics.Metrics

	mu       sync.Mutex
	runners  map[string]*runner
	order    []string
	started  bool
	stopping chan struct{}
	stopOnce sync.Once
	loops    sync.WaitGroup // the background loops (spawn), which end on stopping
	control  *Control
	eng      *take.Engine  // serves every downstream but batching ones
	engStop  func()        // ends the engine's Run
	engDone  chan struct{} // closed when the engine's Run returned
	pid      string        // this process in the liveness ZSET
	// trouble: an asynq script call failed on the network since the
	// liveness loop last looked (asynqClient)
	trouble atomic.Bool
	procs   atomic.Int64 // live processes at the last announce (0: not yet known)
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
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.RecoverAfter <= 0 {
		cfg.RecoverAfter = 7 * time.Second
	}
	cfg.RecoverAfter = max(cfg.RecoverAfter, 6*time.Second)
	d := &Dispatcher{
		rdb: rdb, store: lua.New(rdb), cfg: cfg, space: keys.New(cfg.Prefix), log: cfg.Logger,
		runners: map[string]*runner{}, stopping: make(chan struct{}), pid: newProcessID(),
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

var dsName = regexp.MustCompile(keys.NamePattern)

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
	r := &runner{d: d, ds: ds, handlers: map[string]HandlerFunc{}, resumed: make(chan struct{})}
	r.longHold.maxWait = ds.MaxWait
	r.lane = newLane(r)
	if ds.Concurrency > 0 || ds.KeyConcurrency > 0 {
		r.leases = newLeaseLane(r)
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
	lim := ds.Rate
	r.rate.Store(&lim)
	r.base.Store(&lim)
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

// DefaultWorkers is the worker budget used when a Downstream leaves
// Workers zero: ceil(rate × maxWait) + 1, between 2 and 1000. A worker
// holds a task from dequeue to the end of its call, so this holds what
// the bucket can release within maxWait plus one call in flight: a crash
// strands no more than that. Handlers slower than about maxWait need more
// workers (Little's law: rate × (wait + call time)); see
// docs/operations.md, sizing workers.
func DefaultWorkers(rate limiters.Limit, maxWait time.Duration) int {
	return sizing.DefaultWorkers(rate, maxWait)
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
	for _, name := range d.order {
		r := d.runners[name]
		ctx, cancel := context.WithTimeout(context.Background(), d.cfg.RedisTimeout)
		if !r.refresh(ctx) {
			r.apply()
		}
		cancel()
		r.seedOffset()
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
		recoverAfter: d.cfg.RecoverAfter, log: d.log, m: d.m, trouble: &d.trouble, procs: &d.procs, stopping: d.stopping}
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
	return r.pauseGate() != nil, nil
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

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
