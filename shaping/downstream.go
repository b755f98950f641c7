package shaping

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaper-io/shaper/internal/fairindex"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/priority"
	"github.com/shaper-io/shaper/internal/quota"
	"github.com/shaper-io/shaper/internal/rlheader"
	"github.com/shaper-io/shaper/internal/sizing"
	"github.com/shaper-io/shaper/limiters"
)

// The model: what a user says of a downstream (Downstream and the types
// of its fields) and of a dispatcher (Config), what a handler gets (Task),
// their defaults and their checks. It reaches nothing of the parts that
// serve it.

// DefaultMaxHold is the longest one answer holds a downstream unless its
// configuration says otherwise: an hour, so that one buggy header cannot
// freeze a stream for a day.
const DefaultMaxHold = sizing.DefaultMaxHold

// prepare checks ds and fills in its defaults (MaxWait, Workers,
// MaxCost); its errors name the downstream and the field.
func (ds *Downstream) prepare() error {
	if msg := keys.CheckName(ds.Name); msg != "" {
		return fmt.Errorf("shaping: downstream name: %s", msg)
	}
	if err := sizing.ValidateRate(ds.Rate); err != nil {
		return fmt.Errorf("shaping: downstream %q: %w", ds.Name, err)
	}
	if ds.Burst < 0 || ds.MaxCost < 0 {
		return fmt.Errorf("shaping: downstream %q: Burst and MaxCost must not be negative", ds.Name)
	}
	if p := sizing.CheckCalls(ds.Workers, ds.Concurrency, ds.KeyConcurrency, ds.LeaseTime); p != nil {
		return fmt.Errorf("shaping: downstream %q: %w", ds.Name, p)
	}
	if a := ds.Adaptive; a != nil {
		if err := sizing.ValidateRate(a.Floor); err != nil {
			return fmt.Errorf("shaping: downstream %q: adaptive floor: %w", ds.Name, err)
		}
		if err := sizing.ValidateRate(a.Ceiling); err != nil {
			return fmt.Errorf("shaping: downstream %q: adaptive ceiling: %w", ds.Name, err)
		}
		if p := sizing.CheckAdaptive(a.Floor, a.Ceiling, a.Step, a.Decrease, a.Interval); p != nil {
			return fmt.Errorf("shaping: downstream %q: %w", ds.Name, p.Under("adaptive", "Adaptive"))
		}
	}
	if b := ds.Breaker; b != nil {
		if err := validateBreaker(b, ds.Rate); err != nil {
			return fmt.Errorf("shaping: downstream %q: %w", ds.Name, err)
		}
	}
	if b := ds.Batch; b != nil {
		if p := sizing.CheckBatch(b.MaxRows, b.MaxDelay, b.Grace); p != nil {
			return fmt.Errorf("shaping: downstream %q: %w", ds.Name, p.Under("batch", "Batch"))
		}
	}
	if f := ds.Fairness; f != nil {
		if p := f.Check(ds.Rate); p != nil {
			return fmt.Errorf("shaping: downstream %q: %w", ds.Name, p.Under("fairness", "Fairness"))
		}
		if ds.Batch != nil {
			return fmt.Errorf("shaping: downstream %q: Fairness and Batch cannot be combined", ds.Name)
		}
	}
	if pr := ds.Priority; pr != nil {
		if err := priority.Validate(pr.Default); err != nil {
			return fmt.Errorf("shaping: downstream %q: Priority.Default: %w", ds.Name, err)
		}
		if err := pr.Weights.Validate(); err != nil {
			return fmt.Errorf("shaping: downstream %q: Priority.Weights: %w", ds.Name, err)
		}
		if ds.Batch != nil {
			return fmt.Errorf("shaping: downstream %q: Priority and Batch cannot be combined (a batch is served by asynq's server, which knows no priority)", ds.Name)
		}
	}
	if p := sizing.CheckWaits(ds.MaxWait, ds.MaxHold); p != nil {
		return fmt.Errorf("shaping: downstream %q: %w", ds.Name, p)
	}
	if ds.MaxHold == 0 {
		ds.MaxHold = DefaultMaxHold
	}
	if ds.MaxWait == 0 {
		ds.MaxWait = time.Second
	}
	if ds.Workers == 0 {
		ds.Workers = DefaultWorkers(ds.Rate, ds.MaxWait)
	}
	if ds.MaxCost == 0 {
		ds.MaxCost = ds.defaultMaxCost()
	}
	if p := quota.Check(ds.Quotas, ds.maxReleaseCost()); p != nil {
		return fmt.Errorf("shaping: downstream %q: %w", ds.Name, p)
	}
	return ds.checkRates()
}

// defaultMaxCost is MaxCost when it is zero: DefaultMaxCost at the rate,
// within what the quotas let a task (a row of a batch) cost
// (quota.CostCap, the config file's rule too).
func (ds *Downstream) defaultMaxCost() int64 {
	m := DefaultMaxCost(ds.Rate, cmp.Or(ds.MaxWait, time.Second), ds.Burst)
	if c := quota.CostCap(ds.Quotas, ds.batchRows()); c > 0 {
		m = min(m, c)
	}
	return m
}

// ErrRateTooSlow is wrapped by Downstream.CheckRate's error (and so by
// Dispatcher.Add's and Control.SetRate's) for a rate at which the
// downstream's largest release would hold it for longer than MaxInterval.
var ErrRateTooSlow = sizing.ErrRateTooSlow

// SlowRateError is the error CheckRate wraps for such a rate: the rate,
// the largest release's cost and how long it would hold the downstream.
type SlowRateError = sizing.SlowRateError

// CheckRate reports whether ds may run at l: l must be a valid rate (Rate
// and Period; its Burst is not read), and ds's largest release (MaxCost,
// or MaxCost × Batch.MaxRows for a batch) must fit in one reservation at
// it, MaxInterval; at a slower rate the bucket refuses every such task
// (limiters.ErrCostExceedsCapacity) and it is archived instead of waiting.
// A zero MaxCost counts as the default Dispatcher.Add fills in.
//
// It is the one rule for every rate a downstream runs at: Dispatcher.Add
// applies it to Rate, the Schedule's rates and the Adaptive floor and
// ceiling; Control.SetRate to an override of a downstream the dispatcher
// serves; the control loop ignores an override in Redis that fails it;
// internal/config applies the same rule (sizing.CheckRate) to the file.
func (ds Downstream) CheckRate(l limiters.Limit) error {
	if err := ds.checkRate(l); err != nil {
		return fmt.Errorf("shaping: downstream %q: %w", ds.Name, err)
	}
	return nil
}

// CheckKeyRate reports why l cannot be a key's ceiling on ds (a runtime
// one: shaper ctl key RATE): an invalid rate, one above ds's configured
// rate (it would never bind), or one slower than a task per MaxInterval.
// Errors wrap limiters.ErrInvalidLimit. It is fairindex.CheckKeyRate, the
// rule internal/config applies to fairness.key_rate and key_rates too.
func (ds Downstream) CheckKeyRate(l limiters.Limit) error {
	if err := fairindex.CheckKeyRate(l, ds.Rate); err != nil {
		return fmt.Errorf("shaping: downstream %q: %w", ds.Name, err)
	}
	return nil
}

func (ds Downstream) checkRate(l limiters.Limit) error {
	if err := sizing.ValidateRate(l); err != nil {
		return err
	}
	if ds.MaxCost == 0 {
		ds.MaxCost = ds.defaultMaxCost()
	}
	return sizing.CheckRate(l, ds.maxReleaseCost())
}

// checkRates applies CheckRate to every rate ds is configured to run at.
func (ds *Downstream) checkRates() error {
	check := func(what string, l limiters.Limit) error {
		if err := ds.checkRate(l); err != nil {
			return fmt.Errorf("shaping: downstream %q: %s%w", ds.Name, what, err)
		}
		return nil
	}
	if err := check("", ds.Rate); err != nil {
		return err
	}
	for _, c := range ds.Schedule {
		if err := check(fmt.Sprintf("schedule %q: ", c.Spec), c.Rate); err != nil {
			return err
		}
	}
	if a := ds.Adaptive; a != nil {
		if err := check("adaptive floor: ", a.Floor); err != nil {
			return err
		}
		return check("adaptive ceiling: ", a.Ceiling)
	}
	return nil
}

// Priority is a downstream's priority setting (Downstream.Priority).
type Priority struct {
	// Default is the priority of a task that names none: 1 to 5; 0
	// means 3.
	Default int
	// Weights, when set, serve the levels by weight instead of strictly
	// in order (priority.Weights); the zero value is strict priority.
	Weights priority.Weights
}

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
	// ControlPoll is how often the control loop reads the versions even
	// though no change was announced (a change announced while this
	// process's subscription was down); zero means 2s. Announced changes
	// are read on the next control tick. Without a take engine (only
	// batching downstreams) nothing is announced to the process, and it
	// reads every ControlInterval.
	ControlPoll time.Duration
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

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// maxReleaseCost is the most one release may cost: MaxCost, or MaxCost
// per row of a batch.
func (ds *Downstream) maxReleaseCost() int64 {
	rows := ds.batchRows()
	if ds.MaxCost > math.MaxInt64/rows {
		return math.MaxInt64
	}
	return ds.MaxCost * rows
}

// batchRows is the rows of a full batch (1 without a batch).
func (ds *Downstream) batchRows() int64 {
	if ds.Batch != nil && ds.Batch.MaxRows > 1 {
		return int64(ds.Batch.MaxRows)
	}
	return 1
}

// answer is what a handler reported about one call (Task.ReportCost,
// Task.ReportHeader).
type answer struct {
	header  http.Header
	cost    int64
	costSet bool
}

// ReportCost tells the dispatcher what the call really cost, in units,
// when only the answer knows it (a GraphQL query's points). After the
// handler returns, the bucket, the quotas and the announced limit are
// charged the difference from t.Cost, or refunded it, for every process:
// the spacing of the next releases follows the real cost. A cost below 1
// is refused, as at enqueue (t.Cost stands); one above the downstream's
// cap (its MaxCost, its smallest quota, what the rate spends in MaxHold)
// is cut to it. Call it before the handler returns.
func (t *Task) ReportCost(units int64) {
	t.answer.cost, t.answer.costSet = units, true
}

// ReportHeader hands the dispatcher the header of the downstream's answer
// (any status). Its RateLimit / RateLimit-Policy, X-RateLimit-* and
// Retry-After fields pace every process sharing the Redis: nothing left
// holds the downstream until the window resets, and less left than the rate
// would spend slows it to what lasts until then. It never speeds up past
// the rate. Call it before the handler returns; HTTPHandler does.
func (t *Task) ReportHeader(h http.Header) { t.answer.header = h }

// Fairness shares a downstream's rate among the admission keys (the
// task's Key: tenant, user, API key) that have tasks waiting: each gets
// rate × its weight / the sum of the waiting keys' weights, and a key
// alone gets the whole rate (no slot idles while any key has work). A key
// that arrives late starts at once, not behind another key's backlog. See
// docs/algorithms.md, fair share, for how it works and its bounds. Its
// fields (Weights, DefaultWeight, KeyRate: a per-key ceiling) are
// documented on fairindex.Fairness, the type it names, which producers
// (queue.FairShare) share.
//
// The zero value shares equally among keys, with no per-key ceiling.
type Fairness = fairindex.Fairness

// FairState is what a park or feed saw, after it.
type FairState = fairindex.State

// DefaultLeaseTime is a lease's life when Downstream.LeaseTime is zero;
// a call renews its lease every third of it.
const DefaultLeaseTime = 10 * time.Second

// Adaptive makes a downstream's rate follow its answers: additive increase
// while it succeeds, multiplicative decrease on 429/503/timeouts, between
// Floor and Ceiling, shared by every process through Redis.
type Adaptive struct {
	// Floor and Ceiling bound the rate; the ceiling is never exceeded.
	Floor, Ceiling limiters.Limit
	// Decrease multiplies the rate on a throttling answer; zero means 0.75.
	Decrease float64
	// Step is added per Interval of successes; zero means Ceiling/20.
	Step limiters.Limit
	// Interval spaces changes: one decrease per interval however many
	// workers saw the 429, and increases only after a calm interval. Zero
	// means 1s.
	Interval time.Duration
}

// leaseTime is a concurrency lease's life: LeaseTime, or DefaultLeaseTime.
func (ds *Downstream) leaseTime() time.Duration {
	if ds.LeaseTime > 0 {
		return ds.LeaseTime
	}
	return DefaultLeaseTime
}
