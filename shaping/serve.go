package shaping

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/hibiken/asynq"

	"github.com/shaper-io/shaper/shaping/take"
)

// Every downstream but a batching one is served by one take.Engine per
// dispatcher: one loop and a few connections for all of them, where an
// asynq.Server per downstream polled on its own (11 commands/s and more
// than one connection per downstream per process, idle). The engine takes
// a task only while the downstream's gate is open (takeGate: not paused,
// no open breaker, no hold the downstream announced), and at most Workers
// leased across every process; the release path (serve) then reserves
// the task's slot as before. A batching downstream keeps its asynq.Server:
// its groups are aggregated by asynq's aggregator.

// serveQueue has r's queue served: by the dispatcher's engine, or by an
// asynq.Server of its own for a batching downstream (asynq aggregates
// its groups).
func (d *Dispatcher) serveQueue(r *runner, q *quarantine) error {
	if r.ds.Batch == nil {
		return d.eng.Add(r.takeDownstream(q))
	}
	b := r.ds.Batch
	acfg := asynq.Config{
		Concurrency: r.ds.Workers,
		Queues:      map[string]int{d.space.Queue(r.ds.Name): 1},
		// Held tasks return to the queue through asynq's abort path
		// (requeue, no attempt consumed) once in-flight releases are
		// done; see Shutdown.
		ShutdownTimeout:          500 * time.Millisecond,
		TaskCheckInterval:        d.cfg.PollInterval,
		DelayedTaskCheckInterval: d.cfg.ForwardInterval,
		// A task recovered from a dead worker goes back at once; handler
		// failures keep asynq's exponential backoff.
		RetryDelayFunc: func(n int, err error, t *asynq.Task) time.Duration {
			if errors.Is(err, asynq.ErrLeaseExpired) {
				return 0
			}
			return asynq.DefaultRetryDelayFunc(n, err, t)
		},
		Logger:           asynqLogger{l: d.log.With("downstream", r.ds.Name), t: d.alog},
		LogLevel:         asynq.WarnLevel,
		GroupAggregator:  asynq.GroupAggregatorFunc(aggregate),
		GroupMaxSize:     b.MaxRows,
		GroupMaxDelay:    cmpOr(b.MaxDelay, 2*time.Second),
		GroupGracePeriod: max(b.Grace, time.Second),
	}
	ac := asynqClient{UniversalClient: d.rdb, clock: d.cfg.Clock, stopping: d.stopping,
		trouble: func() { d.trouble.Store(true) },
		retried: func() {
			if d.m != nil {
				d.m.FinishRetries.WithLabelValues(r.ds.Name).Inc()
			}
		}}
	r.srv = asynq.NewServerFromRedisClient(ac, acfg)
	return r.srv.Start(q.guard(r.ds.Name, r.process))
}

// engineExtend is how often the engine extends its leases: the liveness
// scan's staleness rule (RecoverAfter, default 7s, at least 6s) counts
// missed extensions, so a live process's leases stay fresh through a
// stall of a few seconds.
const engineExtend = 2 * time.Second

// newEngine builds the engine that serves the dispatcher's downstreams.
func (d *Dispatcher) newEngine() (*take.Engine, error) {
	hooks := take.Hooks{
		// a take whose reply was lost strands its tasks: the liveness
		// loop scans for them after trouble (recover.go)
		RedisError: func() {
			d.trouble.Store(true)
			if d.m != nil {
				d.m.ScriptErrors.WithLabelValues("take").Inc()
			}
		},
		FinishRetry: func(ds string) {
			if d.m != nil {
				d.m.FinishRetries.WithLabelValues(ds).Inc()
			}
		},
	}
	return take.New(take.Config{Redis: d.rdb, Keys: d.space, Lease: asynqLease, Extend: engineExtend,
		IdlePoll: d.cfg.PollInterval, Maintain: d.cfg.ForwardInterval, ShutdownTimeout: d.cfg.ShutdownTimeout,
		Workers: 2, Logger: d.log, Hooks: hooks})
}

// takeDownstream is how the engine serves r: each process holds at most
// r's workers (the budget across the fleet is workers per live process).
// A downstream takes only what keeps takeAhead of releases waiting for
// their slots (Want), so what it holds is about that look-ahead and its
// calls in flight, not the whole budget; the release path's bucket still
// decides each slot, and a task that leaves unsent (late, refused) makes
// room for the next at once. On a fair downstream this keeps a key that
// arrives (fair.lua puts its first task at the front of pending) from
// waiting behind the budget's worth of tasks already taken. One with a
// cap per key takes up to the budget: its lane passes over the tasks of
// keys at their cap, which would otherwise fill the look-ahead.
func (r *runner) takeDownstream(q *quarantine) take.Downstream {
	d := take.Downstream{Name: r.ds.Name, InFlight: r.ds.Workers, LateTolerance: -1,
		Handler: r.serveTake, Gate: r.takeGate, Priority: r.ds.Priority != nil, Malformed: func(id string, msg []byte) bool { return q.taken(r.ds.Name, id, msg) },
		BudgetNow: func() int { return r.ds.Workers * int(max(r.d.procs.Load(), 1)) }}
	if r.ds.Priority != nil {
		d.Weights = r.ds.Priority.Weights
	}
	if r.ds.KeyConcurrency == 0 {
		d.Want = r.takeWant
		r.paced = true
	}
	return d
}

// takeAhead is how many releases' worth a FIFO downstream keeps taken
// ahead of its slots, split between the live processes.
const takeAhead = 200 * time.Millisecond

// ahead is how many of r's tasks this process keeps waiting for a slot.
func (r *runner) ahead() int64 {
	per := r.rate.Load().PerSec() * takeAhead.Seconds() / float64(max(r.d.procs.Load(), 1))
	return int64(math.Ceil(per)) + 1
}

// waiting is how many of r's tasks this process holds that are not in a
// call: waiting for a place among the calls or for a slot.
func (r *runner) waiting() int64 { return r.held.Load() - r.releasing.Load() }

// refill is how few of r's waiting tasks make the engine take again: a
// third of ahead, at least 1. The one still waiting covers the take's
// round trip, and each take brings about two thirds of ahead, so a take
// and its reservation serve several releases even at low rates.
func (r *runner) refill() int64 { return max(r.ahead()/3, 1) }

// takeWant is how many tasks the engine should take for r now: what
// tops the waiting ones up to ahead, once they are down to refill. A
// downstream with priorities tops up at every slot, so a task of a
// higher priority that arrives waits for one slot, not for the
// look-ahead.
func (r *runner) takeWant() int {
	ahead, waiting := r.ahead(), r.waiting()
	if waiting > r.refill() && r.ds.Priority == nil {
		return 0
	}
	return int(max(ahead-waiting, 0))
}

// roomMade is called when one of r's waiting tasks starts its call or
// leaves: the engine takes again once they are down to refill (with
// priorities: at once).
func (r *runner) roomMade() {
	if r.paced && (r.waiting() <= r.refill() || r.ds.Priority != nil && r.waiting() < r.ahead()) {
		r.wakeTake()
	}
}

// gateRecheck is how often a closed gate is asked again when no wake
// comes (a wake comes with every control change this process sees).
const gateRecheck = 250 * time.Millisecond

// takeGate says when the engine may take r's tasks (zero: now). Tasks
// already taken wait in the release path; none leaves the queue while a
// pause, an open breaker, a downstream's hold or a long hold the lane
// found (hold.go) lasts.
func (r *runner) takeGate(now time.Time) time.Time {
	if r.pauseGate() != nil {
		return now.Add(gateRecheck)
	}
	local := r.d.cfg.Clock.Now()
	if r.brk != nil {
		if st := r.brk.status(); st.Mode == BreakerOpen && !st.Until.IsZero() {
			if until := st.Until.Add(r.offset.get()); until.After(local) {
				return now.Add(min(until.Sub(local), gateRecheck))
			}
		}
	}
	if at := r.longHold.gate(local, r.offset.get()); !at.IsZero() {
		return now.Add(min(at.Sub(local), gateRecheck))
	}
	if us := r.pushUntil.Load(); us > 0 {
		// the downstream asked to wait until then: take when the last
		// MaxWait before it starts, so the first slots after it are used
		hold := time.UnixMicro(us).Add(r.offset.get()).Add(-r.ds.MaxWait)
		if hold.After(local) {
			return now.Add(min(hold.Sub(local), gateRecheck))
		}
	}
	return time.Time{}
}

// serveTake is the engine's handler for r.
func (r *runner) serveTake(ctx context.Context, t *take.Task) error {
	if t.Type == "" {
		r.outcome("malformed")
		return fmt.Errorf("shaping: downstream %q: task %q has no type (corrupt msg): %w", r.ds.Name, t.ID, asynq.SkipRetry)
	}
	// a FIFO lane queues its waiters by this: priority first, then the
	// order of the takes, so a task of a higher priority taken after the
	// look-ahead's tasks still goes at the next slot; with weighted
	// priority the take chose the order, and the lane keeps it
	order := int64(max(t.Priority, 1))<<takeOrderBits + t.Order
	if pr := r.ds.Priority; pr != nil && !pr.Weights.Strict() {
		order = t.Order
	}
	err := r.serve(withTaken(ctx, taken{order: order, behind: t.Behind}), asynq.NewTaskWithHeaders(t.Type, t.Payload, t.Headers), t.ID, t.Retried)
	if errors.Is(err, errGiveBack) {
		if errors.Is(context.Cause(ctx), ErrCancelled) {
			r.cancelled("before_call")
		}
		return take.ErrRequeue
	}
	return err
}

// cancelled counts a task cancelled after it was taken: before_call
// (removed unsent) or during_call.
func (r *runner) cancelled(when string) {
	if r.d.m != nil {
		r.d.m.Cancelled.WithLabelValues(r.ds.Name, when).Inc()
	}
}
