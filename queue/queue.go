// Package queue is the producer side of shaper: the task envelope, the
// Producer that runs admission and enqueues into a downstream's asynq queue,
// and backlog inspection.
//
// A downstream's queue is the asynq queue "<prefix>:<downstream>"; the
// task's payload is the producer's bytes, untouched, and shaper's few
// fields (cost, admission key, retry budget) travel as asynq task headers,
// so asynq's own tools (asynqmon, the asynq CLI) show shaper's queues as
// ordinary asynq queues.
package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/bucket"
	"github.com/shaper-io/shaper/internal/control"
	"github.com/shaper-io/shaper/internal/envelope"
	"github.com/shaper-io/shaper/internal/fairindex"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/metrics"
	"github.com/shaper-io/shaper/internal/priority"
	"github.com/shaper-io/shaper/internal/sizing"
	"github.com/shaper-io/shaper/limiters"
)

// DefaultType is the task type used when a Task leaves Type empty.
const DefaultType = "shaper:task"

// DefaultMaxRetry is the retry budget of a task that does not set one.
const DefaultMaxRetry = 25

// DefaultRetention is how long a completed task stays readable
// (Inspector, GET /v1/tasks/{id}) on a downstream that sets none.
const DefaultRetention = sizing.DefaultRetention

// Errors. Each is wrapped with %w and a message naming the bad field.
var (
	// ErrInvalidTask: a Task field is missing, malformed or out of range
	// (Validate names it).
	ErrInvalidTask = errors.New("queue: invalid task")
	// ErrUnknownDownstream is shaping.ErrUnknownDownstream: the Producer
	// was given its Downstreams and the task names another.
	ErrUnknownDownstream = control.ErrUnknownDownstream
	// ErrDuplicate: a task with the same UniqueKey exists (Outcome
	// Duplicate).
	ErrDuplicate = errors.New("queue: duplicate unique key")
	// ErrEnqueue: the asynq enqueue failed (Redis down or slow); the task
	// is not in the queue and its admission charge was given back.
	ErrEnqueue = errors.New("queue: enqueue failed")
)

// Task is what a producer enqueues.
type Task struct {
	// Downstream names the destination; required.
	Downstream string
	// Type is the asynq task type; "" means DefaultType.
	Type string
	// Payload is delivered to the handler as it is.
	Payload []byte
	// Key is the admission key (tenant, API key, user); "" is allowed for
	// global-only policies.
	Key string
	// Cost is how many units the task takes in limiters and in the
	// downstream's bucket; 0 means 1.
	Cost int64
	// UniqueKey, when set, becomes the task's ID: a second task with the
	// same key is refused with ErrDuplicate while the first one exists.
	UniqueKey string
	// ProcessAt, when in the future, schedules the task for then.
	ProcessAt time.Time
	// MaxRetry is the handler-failure retry budget; nil means
	// DefaultMaxRetry. Throttling never consumes it.
	MaxRetry *int
	// Timeout bounds one delivery attempt, the wait for its slot included;
	// zero means asynq's default (30 min).
	Timeout time.Duration
	// Deadline, when set, is the latest time the task may start: a task
	// still waiting then is archived unsent ("deadline passed"), and under
	// Shaping.OnLate LateReject one predicted to start later is refused at
	// enqueue. Exclusive with TTL.
	Deadline time.Time
	// TTL, when positive, sets Deadline to the time of Enqueue plus TTL.
	TTL time.Duration
	// CollapseKey, on a downstream in ProducerConfig.Collapse (elsewhere
	// it is refused with ErrInvalidTask), collapses redundant calls: while a task with the same key still waits (not
	// yet taken), this one is collapsed into it (Collapse.Mode) and
	// Receipt.CollapsedInto names it. A task already taken is never
	// touched: this one then waits behind it. At most MaxCollapseKey bytes.
	CollapseKey string
	// Priority is 1 (taken first) to 5 (taken last); 0 means the
	// downstream's default (ProducerConfig.Priority), else 3. A waiting
	// task of a higher priority is always taken before one of a lower
	// priority; retries keep it. Only a downstream in
	// ProducerConfig.Priority takes priorities other than 3. On a fair
	// downstream, fair share orders the tasks of priority 3; the others
	// go by priority alone, first in, first out.
	Priority int
}

// Receipt describes what Enqueue did with a task. Its zero value is the
// receipt of a task that was not enqueued (Outcome NotEnqueued).
type Receipt struct {
	// Outcome classifies the result: Accepted, Deferred, Rejected,
	// Duplicate or NotEnqueued. Only Accepted and Deferred tasks have an ID.
	Outcome Outcome
	// ID is the task's ID (its UniqueKey, when set); "" unless enqueued.
	ID string
	// Queue is the asynq queue the task went (or would have gone) to.
	Queue string
	// Downstream is the task's downstream.
	Downstream string
	// Deferred is true when admission rejected the task now and it was
	// scheduled to run at ProcessAt (its Retry-After) instead.
	Deferred bool
	// ProcessAt is when the task becomes runnable; zero unless enqueued.
	// A fair downstream's task is runnable at its turn, not at ProcessAt:
	// see ExpectedStart.
	ProcessAt time.Time
	// Priority is the priority the task waits at (1 to 5); 0 unless
	// enqueued.
	Priority int
	// CollapsedInto is, for Outcome Collapsed, the waiting task this one
	// was collapsed into (also in ID).
	CollapsedInto string
	// FairWaiting is true for the task of a fair downstream: it waits in
	// asynq's pending list (scheduled until its ProcessAt, if any) for its
	// turn in fair order, until a dispatcher's take picks it.
	FairWaiting bool
	// ExpectedStart is an estimate of when the task will be released:
	// for a fair downstream, from its place in fair order; for another,
	// from its downstream's bucket and the backlog ahead of it (see
	// ProducerConfig.Predict). Zero when there is none.
	ExpectedStart time.Time
	// Admission is the admission decision (zero when there is no policy).
	Admission limiters.Result
}

// OnReject says what admission does with a rejected task.
type OnReject int

const (
	// Reject refuses the task with a *RejectedError carrying Retry-After.
	Reject OnReject = iota
	// Defer enqueues the task now, scheduled to run at its Retry-After.
	Defer
)

// Admission is a downstream's admission policy.
type Admission struct {
	// Limiter decides; use limiters.NewLayered for several limits.
	Limiter limiters.Limiter
	// OnReject: Reject (the zero value) or Defer.
	OnReject OnReject
	// Modes are Limiter's layers' modes, which the Producer keeps
	// current with the runtime modes in Redis (`shaper ctl mode`); nil
	// when the modes never change at runtime.
	Modes []LimiterMode
}

// RejectedError is returned when admission rejects a task. Result carries
// the decision: RetryAfter, Remaining, Limit.
type RejectedError struct {
	// Downstream is the task's downstream.
	Downstream string
	// Result is the rejecting decision.
	Result limiters.Result
}

// Error names the downstream, the rejecting limiter and the Retry-After.
func (e *RejectedError) Error() string {
	return fmt.Sprintf("queue: task for %q rejected by admission (%s %q): retry after %s",
		e.Downstream, e.Result.Algorithm, e.Result.Name, e.Result.RetryAfter.Round(time.Millisecond))
}

// ProducerConfig configures a Producer. The zero value works (no admission,
// any downstream name accepted).
type ProducerConfig struct {
	// Prefix is the key prefix; "" means "shaper".
	Prefix string
	// Downstreams, when non-empty, lists the names that may be enqueued
	// to; others get ErrUnknownDownstream.
	Downstreams []string
	// Admission policies by downstream.
	Admission map[string]Admission
	// Registerer is where the producer registers its Prometheus
	// collectors (shaper_admission_*, shaper_queue_enqueued_total: see
	// docs/operations.md); nil records nothing. Collectors already
	// registered there (by a Dispatcher or Cron given the same
	// Registerer) are shared, not registered twice.
	Registerer prometheus.Registerer
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// MaxPayload bounds a payload's size in bytes; 0 means 1 MiB.
	MaxPayload int
	// Shaping is each downstream's shaping as the producer needs it for
	// Receipt.ExpectedStart and deadlines (Shaping.OnLate); a downstream
	// absent gets no prediction.
	Shaping map[string]Shaping
	// Predict predicts ExpectedStart for every task of a downstream in
	// Shaping (two Redis commands each), not only for tasks with a
	// deadline.
	Predict bool
	// ControlInterval is how stale the producer's copy of the runtime
	// state (modes, rate overrides) may get while it enqueues; zero means
	// DefaultControlInterval.
	ControlInterval time.Duration
	// MaxRetry is the default retry budget per downstream for tasks that
	// set none; missing downstreams use DefaultMaxRetry.
	MaxRetry map[string]int
	// Retention is how long a completed task of each downstream stays
	// readable before it is deleted (asynq's Retention; 0 keeps none);
	// missing downstreams use DefaultRetention. Redis holds about rate ×
	// retention completed tasks.
	Retention map[string]time.Duration
	// MaxCost bounds a task's cost per downstream (the downstream's
	// shaping.Downstream.MaxCost); a task above it is refused with
	// limiters.ErrCostExceedsCapacity. Missing downstreams are bounded
	// only at release, where the dispatcher archives such a task.
	MaxCost map[string]int64
	// Fair names the downstreams whose tasks wait in weighted fair order
	// of their Key (shaping.Downstream.Fairness) before their queue.
	Fair map[string]FairShare
	// Collapse names the downstreams that collapse redundant calls
	// (Task.CollapseKey).
	Collapse map[string]Collapse
	// Priority names the downstreams that serve priorities
	// (shaping.Downstream.Priority), with the priority of a task that
	// names none (0 means 3).
	Priority map[string]int
	// Batched names the downstreams whose tasks are aggregated into
	// batches (shaping.Downstream.Batch), with how many aggregation groups
	// to spread them over (shaping.BatchGroups): asynq closes at most one
	// batch per group per check, so one group caps a downstream at
	// MaxRows per second. Their tasks carry their ID into the batch.
	Batched map[string]int
}

// Producer enqueues tasks after admission. Safe for concurrent use.
// The zero Producer is not usable: NewProducer builds one.
type Producer struct {
	client  *asynq.Client
	rdb     redis.UniversalClient
	scripts *lua.Store // priority placement, collapse
	fair    *fairindex.Queue
	// insp takes back a fair task that could not be parked or is refused
	// as late: one for the producer, not one per call
	insp    *asynq.Inspector
	cfg     ProducerConfig
	m       *metrics.Metrics // nil records nothing
	space   keys.Space
	known   map[string]bool
	seq     atomic.Uint64  // spreads batched tasks over aggregation groups
	buckets *bucket.Client // for predictions
	follow  *follower      // nil: no runtime state to follow
}

// NewProducer returns a Producer over rdb. Close it when done (rdb itself
// stays open: it is the caller's).
func NewProducer(rdb redis.UniversalClient, cfg ProducerConfig) *Producer {
	if cfg.MaxPayload <= 0 {
		cfg.MaxPayload = 1 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	p := &Producer{client: asynq.NewClientFromRedisClient(rdb), rdb: rdb, scripts: lua.New(rdb), fair: fairindex.New(rdb, cfg.Prefix),
		insp: asynq.NewInspectorFromRedisClient(rdb), cfg: cfg, m: metrics.New(cfg.Registerer), space: keys.New(cfg.Prefix),
		buckets: bucket.New(rdb, cfg.Prefix, bucket.DefaultTimeout, nil)}
	p.follow = p.newFollower(control.New(rdb, cfg.Prefix))
	if len(cfg.Downstreams) > 0 {
		p.known = map[string]bool{}
		for _, d := range cfg.Downstreams {
			p.known[d] = true
		}
	}
	return p
}

// Queue is the asynq queue that downstream's tasks go to.
func (p *Producer) Queue(downstream string) string { return p.space.Queue(downstream) }

// Close releases the asynq client (not the Redis client).
func (p *Producer) Close() error { return p.client.Close() }

// Validate checks a task without enqueuing it.
func (p *Producer) Validate(t Task) error {
	switch {
	case t.Downstream == "":
		return fmt.Errorf("%w: downstream is required", ErrInvalidTask)
	case !keys.ValidName(t.Downstream):
		return fmt.Errorf("%w: downstream %q: want %s", ErrInvalidTask, t.Downstream, keys.NameRule)
	case p.known != nil && !p.known[t.Downstream]:
		return unknownDownstreamError(t.Downstream)
	case t.Cost < 0:
		return fmt.Errorf("%w: cost must not be negative, got %d", ErrInvalidTask, t.Cost)
	case t.Cost > p.maxCost(t.Downstream):
		return fmt.Errorf("%w: cost %d exceeds the capacity %d of downstream %q (its max_cost: what its bucket holds unless set), so it could never be released",
			limiters.ErrCostExceedsCapacity, t.Cost, p.maxCost(t.Downstream), t.Downstream)
	case len(t.Payload) > p.cfg.MaxPayload:
		return fmt.Errorf("%w: payload is %d bytes, over the limit of %d", ErrInvalidTask, len(t.Payload), p.cfg.MaxPayload)
	case t.MaxRetry != nil && (*t.MaxRetry < 0 || *t.MaxRetry > 10000):
		return fmt.Errorf("%w: max retry must be 0..10000, got %d", ErrInvalidTask, *t.MaxRetry)
	case len(t.Key) > 1024:
		return fmt.Errorf("%w: key is %d bytes, over the limit of 1024", ErrInvalidTask, len(t.Key))
	case len(t.UniqueKey) > 1024:
		return fmt.Errorf("%w: unique key is %d bytes, over the limit of 1024", ErrInvalidTask, len(t.UniqueKey))
	case len(t.CollapseKey) > MaxCollapseKey:
		return fmt.Errorf("%w: collapse key is %d bytes, over the limit of %d", ErrInvalidTask, len(t.CollapseKey), MaxCollapseKey)
	case t.CollapseKey != "" && !p.collapses(t.Downstream):
		return fmt.Errorf("%w: collapse key %q: downstream %q collapses nothing (set collapse in its config)", ErrInvalidTask, t.CollapseKey, t.Downstream)
	case t.Timeout < 0:
		return fmt.Errorf("%w: timeout must not be negative, got %s", ErrInvalidTask, t.Timeout)
	}
	if err := priority.Validate(t.Priority); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidTask, err)
	}
	if _, err := p.priorityOf(t); err != nil {
		return err
	}
	if err := checkDeadline(t); err != nil {
		return err
	}
	if err := checkStart(t, time.Now()); err != nil {
		return err
	}
	return checkText(t)
}

func (p *Producer) maxCost(downstream string) int64 {
	if m, ok := p.cfg.MaxCost[downstream]; ok && m > 0 {
		return m
	}
	return math.MaxInt64
}

// Enqueue runs the downstream's admission policy (if any) and enqueues the
// task. Receipt.Outcome says what happened; the error says why a task was
// not enqueued (it is nil for an enqueued task). A rejection returns
// *RejectedError (errors.As) and enqueues nothing. An admission that failed
// open is no error: the task is enqueued and Receipt.Admission.FailedOpen
// says so. If admission allowed the task but the enqueue fails, the
// admission charge is refunded (Result.Cancel).
func (p *Producer) Enqueue(ctx context.Context, t Task) (Receipt, error) {
	rec, err := p.admitAndEnqueue(ctx, t)
	switch {
	case rec.Outcome == Collapsed:
	case rec.ID != "" && rec.Deferred:
		rec.Outcome = Deferred
	case rec.ID != "":
		rec.Outcome = Accepted
	case errors.As(err, new(*RejectedError)):
		rec.Outcome = Rejected
	case errors.Is(err, ErrDuplicate):
		rec.Outcome = Duplicate
	case errors.Is(err, ErrLate):
		rec.Outcome = Late
	}
	return rec, err
}

func (p *Producer) admitAndEnqueue(ctx context.Context, t Task) (Receipt, error) {
	if err := p.Validate(t); err != nil {
		return Receipt{}, err
	}
	if t.Cost == 0 {
		t.Cost = 1
	}
	if t.Type == "" {
		t.Type = DefaultType
	}
	t.Deadline, t.TTL = t.deadline(time.Now()), 0
	t.Priority, _ = p.priorityOf(t) // checked by Validate
	col, collapsing := p.cfg.Collapse[t.Downstream]
	collapsing = collapsing && t.CollapseKey != ""
	if collapsing {
		// before admission: a collapsed task makes no call of its own
		if rec, done, err := p.collapse(ctx, col, &t); done {
			return rec, err
		}
	}
	p.follow.maybeRefresh(ctx)
	rec := Receipt{Downstream: t.Downstream, Queue: p.space.Queue(t.Downstream)}
	adm, hasAdm := p.cfg.Admission[t.Downstream]
	if hasAdm && adm.Limiter != nil {
		res, err := adm.Limiter.Allow(ctx, t.Key, t.Cost)
		rec.Admission = res
		p.shadowDecisions(t.Downstream, adm, res)
		if err != nil && !errors.Is(err, limiters.ErrFailedClosed) {
			p.decision(t.Downstream, res, "error")
			return rec, err
		}
		if res.FailedOpen && p.m != nil {
			p.m.FailOpen.WithLabelValues(t.Downstream, res.Name).Inc()
		}
		if !res.Allowed {
			if adm.OnReject != Defer || errors.Is(err, limiters.ErrFailedClosed) {
				p.decision(t.Downstream, res, "rejected")
				return rec, errors.Join(&RejectedError{Downstream: t.Downstream, Result: res}, err)
			}
			p.decision(t.Downstream, res, "deferred")
			rec.Deferred = true
			// asynq keeps a scheduled time in whole seconds, truncated;
			// round up so that the task never runs before its Retry-After.
			at := time.Now().Add(res.RetryAfter)
			if s := at.Truncate(time.Second); !s.Equal(at) {
				at = s.Add(time.Second)
			}
			if at.After(t.ProcessAt) {
				t.ProcessAt = at
			}
		} else {
			p.decision(t.Downstream, res, "allowed")
		}
	}
	if err := p.predict(ctx, t, &rec); err != nil {
		p.refund(ctx, &rec, &err)
		return rec, err
	}
	info, err := p.enqueue(ctx, t)
	if err != nil {
		p.refund(ctx, &rec, &err)
		if collapsing {
			p.releaseCollapse(ctx, t, &err)
		}
		return rec, err
	}
	rec.ID = info.ID
	rec.ProcessAt = info.NextProcessAt
	rec.Priority = t.Priority
	if err := p.place(ctx, t.Downstream, info.ID, t.Priority); err != nil {
		// enqueued at the default priority: the task is kept, and said so
		p.cfg.Logger.Warn("queue: task enqueued at the default priority: its priority could not be recorded",
			"downstream", t.Downstream, "id", info.ID, "priority", t.Priority, "err", err)
		rec.Priority = priority.Default
	}
	if fs, ok := p.fairFor(t); ok {
		due := later(t.ProcessAt, time.Now())
		rec.ProcessAt = due
		rec.FairWaiting = true
		rec.ExpectedStart, err = p.park(ctx, fs, t, info.ID, due)
		if err == nil {
			err = p.lateFair(t, rec)
		}
		if err != nil {
			rec.ID, rec.ProcessAt, rec.FairWaiting = "", time.Time{}, false
			p.refund(ctx, &rec, &err)
			return rec, err
		}
	}
	if p.m != nil {
		p.m.Enqueued.WithLabelValues(t.Downstream).Inc()
		if rec.Deferred {
			p.m.Deferrals.WithLabelValues(t.Downstream).Inc()
		}
	}
	return rec, nil
}

// refund gives back the admission charge of a task that was not enqueued.
func (p *Producer) refund(ctx context.Context, rec *Receipt, err *error) {
	if rec.Admission.Allowed && !rec.Deferred {
		if rerr := rec.Admission.Cancel(context.WithoutCancel(ctx)); rerr != nil {
			*err = errors.Join(*err, fmt.Errorf("queue: refund admission: %w", rerr))
		}
	}
}

func (p *Producer) decision(ds string, res limiters.Result, outcome string) {
	// with every layer in shadow no limiter decided: only shadow counts
	if p.m != nil && (res.Name != "" || res.Shadow == nil) {
		p.m.Decisions.WithLabelValues(ds, res.Name, outcome).Inc()
	}
}

// meta is t's envelope (the headers shaper's dispatcher reads) and its
// retry budget.
func (p *Producer) meta(t Task) (envelope.Meta, int) {
	maxRetry := DefaultMaxRetry
	if r, ok := p.cfg.MaxRetry[t.Downstream]; ok {
		maxRetry = r
	}
	if t.MaxRetry != nil {
		maxRetry = *t.MaxRetry
	}
	return envelope.Meta{Cost: t.Cost, Key: t.Key, MaxRetry: maxRetry, Deadline: t.Deadline}, maxRetry
}

// EnqueueHook, when set, replaces the asynq enqueue (tests use it to make
// the enqueue fail after admission).
var enqueueHook func(ctx context.Context, t Task) error

func (p *Producer) enqueue(ctx context.Context, t Task) (*asynq.TaskInfo, error) {
	if enqueueHook != nil {
		if err := enqueueHook(ctx, t); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrEnqueue, err)
		}
	}
	meta, maxRetry := p.meta(t)
	opts := []asynq.Option{
		asynq.Queue(p.space.Queue(t.Downstream)),
		asynq.MaxRetry(maxRetry + envelope.CrashAllowance),
	}
	retention, ok := p.cfg.Retention[t.Downstream]
	if !ok {
		retention = DefaultRetention
	}
	if retention > 0 {
		opts = append(opts, asynq.Retention(retention))
	}
	headers := meta.Headers()
	id := t.UniqueKey
	if groups := p.cfg.Batched[t.Downstream]; groups > 0 {
		n := p.seq.Add(1)
		opts = append(opts, asynq.Group(t.Downstream+"#"+strconv.FormatUint(n%uint64(groups), 10)))
		if id == "" {
			id = uuid.NewString()
		}
		headers[envelope.HeaderRowID] = id
	}
	if id != "" {
		opts = append(opts, asynq.TaskID(id))
	}
	if !t.ProcessAt.IsZero() && t.ProcessAt.After(time.Now()) {
		opts = append(opts, asynq.ProcessAt(t.ProcessAt))
	}
	if t.Timeout > 0 {
		opts = append(opts, asynq.Timeout(t.Timeout))
	} else if ht := p.cfg.Shaping[t.Downstream].HoldTimeout; ht > 0 {
		opts = append(opts, asynq.Timeout(ht))
	}
	info, err := p.client.EnqueueContext(ctx, asynq.NewTaskWithHeaders(t.Type, t.Payload, headers), opts...)
	if errors.Is(err, asynq.ErrTaskIDConflict) || errors.Is(err, asynq.ErrDuplicateTask) {
		return nil, fmt.Errorf("%w %q: %w", ErrDuplicate, t.UniqueKey, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEnqueue, err)
	}
	return info, nil
}
