package shaping

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/shaper-io/shaper/internal/control"
	"github.com/shaper-io/shaper/internal/envelope"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/priority"
	"github.com/shaper-io/shaper/limiters"
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
func (d *services) serveQueue(r *runner, q *quarantine) error {
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
func (d *services) newEngine() (*take.Engine, error) {
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
		Cancelled: func(ds string) {
			if d.m != nil {
				d.m.Cancelled.WithLabelValues(ds, "before_call").Inc()
			}
		},
	}
	return take.New(take.Config{Redis: d.rdb, Keys: d.space, Lease: asynqLease, Extend: engineExtend,
		IdlePoll: d.cfg.PollInterval, Maintain: d.cfg.ForwardInterval, ShutdownTimeout: d.cfg.ShutdownTimeout,
		Workers: 2, Logger: d.log, Hooks: hooks,
		Follow: map[string]func(string){d.space.ControlChannel(): func(string) { poke(d.notices) },
			d.space.ProcessesChannel(): func(string) { poke(d.fleet) }}})
}

// poke sends on c, a channel of one, unless a send is pending already.
func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// takeDownstream is how the engine serves r: each process holds at most
// r's workers (the budget across the fleet is workers per live process),
// and each take reserves the slots of what it moves (takeslot.go), so
// what a process holds is the tasks whose slots start within the take's
// look-ahead and its calls in flight, whatever the budget.
func (r *runner) takeDownstream(q *quarantine) take.Downstream {
	// InLine: a take's tasks queue at the lane in take order (under a
	// concurrency cap, in the lease lane's queue: the next task, of
	// another key, must not wait behind a lease)
	d := take.Downstream{Name: r.ds.Name, InFlight: r.ds.Workers, LateTolerance: -1, InLine: true,
		Handler: r.serveTake, Gate: r.takeGate, Priority: r.ds.Priority != nil, Fair: r.ds.Fairness != nil, Malformed: func(id string, msg []byte) bool { return q.taken(r.ds.Name, id, msg) },
		BudgetNow: func() int { return r.ds.Workers * int(max(r.d.procs.Load(), 1)) }}
	if r.ds.Priority != nil {
		d.Weights = r.ds.Priority.Weights
	}
	// the take reserves its tasks' slots: what it moves is the slots that
	// start within the engine's look-ahead, wherever they are
	d.Reserve, d.Reserved, d.MaxUnits = r.takeReserve, r.takeReserved, r.ds.maxTakeUnits()
	d.Pause = &lua.TakePause{Key: r.d.space.DownstreamState(r.ds.Name), Field: control.PausedField}
	if r.ds.Priority != nil {
		d.LookAhead = priorityLookAhead
	}
	if r.ds.Fairness != nil {
		d.Ceiling, d.LookAhead, d.Lead = r.takeCeiling(), fairLookAhead, fairLead
	}
	if r.leases != nil {
		d.Leases, d.Unheld = r.takeLeases(), r.releaseLease
	}
	return d
}

// priorityLookAhead is the take's look-ahead on a downstream with
// priorities: a task of a higher priority that arrives waits behind the
// slots already reserved, at most this and one interval (the issue's
// bound for the first urgent task is 2 intervals + 100ms), where the
// engine's 150ms would let it wait about 170ms at 50/s.
const priorityLookAhead = 100 * time.Millisecond

// fairLookAhead is the take's look-ahead on a fair downstream: a key that
// arrives starts at the virtual time, so its first task is the next the
// take picks, and it waits behind at most this of slots already reserved
// (the bound for a newcomer's first release is 2 intervals +
// 100ms).
const fairLookAhead = 100 * time.Millisecond

// fairLead is how far ahead a fair downstream's next slot must be for a
// take: half the look-ahead, not a third, since a fair take does more
// per task (fair order, key ceilings) and, while producers park tasks,
// waits behind their scripts; a take late past its lead loses slots.
const fairLead = 50 * time.Millisecond

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
	tk := taken{order: order, backlog: t.Backlog}
	if t.Reservation != nil {
		tk.slot = &takeSlot{res: t.Reservation}
		if m := t.Reservation.Lease; m != "" && r.leases != nil {
			tk.lease = r.leases.adopt(m)
			defer r.releaseLease(m)
		}
	}
	err := r.serve(withTaken(ctx, tk), asynq.NewTaskWithHeaders(t.Type, t.Payload, t.Headers), t.ID, t.Retried)
	if errors.Is(err, errGiveBack) {
		if errors.Is(context.Cause(ctx), ErrCancelled) {
			r.cancelled("before_call")
			return take.ErrRequeue
		}
		return r.backInLine(t)
	}
	return err
}

// backInLine is where a task given back unsent goes: first in fair order
// on a fair downstream (take.Hold, Again), where the next take reserves
// its next slot under its key's ceiling and cap; else the head of its
// queue (or of its priority list: fair order is priority 3's). At
// pending's head, out of fair order, its key's ceiling (moved on by the
// take that reserved the wasted slot) would hold the tail, and every
// take would read it again until then.
func (r *runner) backInLine(t *take.Task) error {
	if r.ds.Fairness == nil || t.Priority != priority.Default {
		return take.ErrRequeue
	}
	meta, err := envelope.Decode(t.Headers)
	if err != nil || meta.Key == "" {
		return take.ErrRequeue
	}
	return &take.Hold{Key: meta.Key, Cost: meta.Cost, Weight: r.ds.Fairness.Weight(meta.Key), Again: true}
}

// cancelled counts a task cancelled after it was taken: before_call
// (removed unsent) or during_call.
func (r *runner) cancelled(when string) {
	if r.d.m != nil {
		r.d.m.Cancelled.WithLabelValues(r.ds.Name, when).Inc()
	}
}

// giveBack ends the serving of a task the dispatcher will not release:
// it goes back to the head of its queue with no attempt consumed. Under
// the engine that is errGiveBack; under an asynq.Server (a batching
// downstream) the task is held until asynq, at shutdown, requeues it and
// cancels ctx, as an error would go through asynq's retry path, which
// archives MaxRetry(0) tasks.
func (r *runner) giveBack(ctx context.Context) error {
	if r.srv == nil {
		return errGiveBack
	}
	<-ctx.Done()
	return ctx.Err()
}

// spoiled reports whether the slot res, just come for t, cannot be used,
// and gives up what it held: again says t queues at the front for another
// slot (it woke too late, or a pushback came after the slot was
// reserved); an error ends t's serving unsent (its key was paused
// meanwhile).
func (r *runner) spoiled(ctx context.Context, t *Task, res Reservation) (again bool, err error) {
	if r.skipLate(res) {
		return true, nil
	}
	if r.push.before(t.Slot) {
		// reserved before a pushback: the downstream asked to wait past
		// it, so the slot is given up, its quota units at once (the next
		// reservation must find them back, or it waits for the quota's
		// window)
		if len(r.ds.Quotas) > 0 {
			r.unquota(t.Cost, grant{slot: t.Slot, issued: t.seq})
		}
		return true, nil
	}
	if r.ds.Fairness.Paused(t.Key) {
		// its key was paused while the slot came: the slot is wasted,
		// and the task waits with its key's other tasks
		r.wasted(t.Cost, grant{slot: t.Slot, issued: t.seq})
		return false, r.keyHold(ctx, t)
	}
	return false, nil
}

// keyHold ends the serving of a task whose admission key is paused: under
// the engine it goes to its key's held set (take.Hold), where the key's
// other tasks wait and from where a resume brings it back in fair order;
// under an asynq.Server (never fair) it is given back.
func (r *runner) keyHold(ctx context.Context, t *Task) error {
	if r.srv != nil {
		return r.giveBack(ctx)
	}
	r.outcome("key_paused")
	return &take.Hold{Key: t.Key, Cost: t.Cost, Weight: r.ds.Fairness.Weight(t.Key)}
}

// process is the asynq.Server's handler (a batching downstream).
func (r *runner) process(ctx context.Context, at *asynq.Task) error {
	id, _ := asynq.GetTaskID(ctx)
	retried, _ := asynq.GetRetryCount(ctx)
	return r.serve(ctx, at, id, retried)
}

// serve releases one task taken from the queue (attempt retried+1): it
// waits for a place among the calls and a slot, calls the handler, and
// says how the task ends (nil completes it).
func (r *runner) serve(ctx context.Context, at *asynq.Task, id string, retried int) error {
	r.hold(1)
	defer r.hold(-1)
	t, h, budget, err := r.task(at, id, retried)
	if err != nil {
		r.outcome("malformed")
		return fmt.Errorf("%w: %w", err, asynq.SkipRetry)
	}
	if err := r.expire(t); err != nil {
		return err // late already: archived before it takes a lease or a slot
	}
	ctx = withDeadline(ctx, t.Deadline)
	if r.leases != nil {
		// a place among the calls in flight first, then a slot: the wait
		// for a lease holds no attempt and no slot (a take that reserved
		// the slot gave the lease too: serveTake holds it)
		lease := takenOf(ctx).lease
		if lease == nil {
			l, err := r.leases.acquire(ctx, t.Key)
			if err != nil {
				return r.giveBack(ctx)
			}
			lease = &l
			defer r.releaseLease(lease.member)
		}
		placed := sync.OnceFunc(func() { close(lease.placed) })
		defer placed()
		ctx = context.WithValue(ctx, placedKey{}, placed)
		if lease.prev != nil {
			select {
			case <-lease.prev:
			case <-ctx.Done():
				return r.giveBack(ctx)
			}
		}
	}
	front := false // queue at the front: this task's last slot was wasted
	for {
		res, tok, err := r.slot(ctx, t.Cost, t.Key, front)
		front = false
		if errors.Is(err, limiters.ErrCostExceedsCapacity) {
			r.outcome("malformed")
			return fmt.Errorf("%w: %w", err, asynq.SkipRetry)
		}
		if errors.Is(err, ErrDeadlinePassed) {
			return r.lateArchive(t)
		}
		if err != nil {
			return r.giveBack(ctx)
		}
		if err := r.expire(t); err != nil {
			return err // woke past the deadline: the slot is wasted, the task never sent late
		}
		t.Slot, t.seq = res.Slot(), res.seqN(0)
		if again, err := r.spoiled(ctx, t, res); again {
			front = true
			continue
		} else if err != nil {
			return err
		}
		herr, started := r.release(ctx, h, t)
		if !started {
			return r.giveBack(ctx)
		}
		if herr != nil && errors.Is(context.Cause(ctx), ErrCancelled) {
			// cut by an operator: not the downstream's failure (no breaker,
			// no adaptive step); the engine removes the task
			r.outcome("cancelled")
			r.cancelled("during_call")
			return herr
		}
		d := Classify(herr, budget, r.ds.Adaptive != nil)
		if d.Outcome == "throttled" && !t.answer.costSet && len(r.ds.Quotas) > 0 {
			// refused (429/503): the call used none of the quotas, given
			// back before the task asks again; its slot of the rate stays
			// spent (refunding it would let refusals breed releases faster
			// than the rate)
			r.unquota(t.Cost, grant{slot: t.Slot, issued: t.seq})
		}
		r.answered(t) // the answer's cost and limits, whatever the outcome
		if r.brk != nil && r.brk.record(ctx, tok, d.Outage) {
			// the breaker opened over this failure: it is the outage's,
			// not the task's, and the task waits for the breaker
			d = Decision{Action: Throttle, Adapt: d.Adapt, Outcome: "outage"}
		}
		r.outcome(d.Outcome)
		if d.Adapt != "" {
			r.adapt(d.Adapt)
		}
		if d.Action != Throttle {
			r.push.bare.Store(0)
			return d.Err // nil completes; SkipRetry archives; others retry
		}
		if d.Unsaid && d.Pause > 0 {
			d.Pause = r.push.bareBackoff(d.Pause)
		}
		if d.Pause > 0 {
			r.pushBack(ctx, r.capHold(d.Pause, "Retry-After (refused call)"))
		}
		// the task waits for a slot after the pause; no attempt consumed
	}
}

// task reads the asynq task into a Task and finds its handler; an error
// means the task can never be delivered (archived as malformed).
func (r *runner) task(at *asynq.Task, id string, retried int) (*Task, HandlerFunc, Budget, error) {
	meta, err := envelope.Decode(at.Headers())
	if err != nil {
		return nil, nil, Budget{}, err
	}
	h := r.handlers[at.Type()]
	if h == nil {
		h = r.ds.Handler
	}
	if h == nil {
		return nil, nil, Budget{}, fmt.Errorf("shaping: downstream %q has no handler for task type %q", r.ds.Name, at.Type())
	}
	t := &Task{ID: id, Type: at.Type(), Payload: at.Payload(), Headers: at.Headers(), Downstream: r.ds.Name,
		Key: meta.Key, Cost: meta.Cost, Retried: retried, Deadline: meta.Deadline}
	return t, h, Budget{Retried: retried, MaxRetry: meta.MaxRetry}, nil
}

// release calls the handler at its slot; started is false when the
// dispatcher stopped while the slot came (nothing was released).
func (r *runner) release(ctx context.Context, h HandlerFunc, t *Task) (herr error, started bool) {
	r.releasing.Add(1)
	defer r.releasing.Add(-1)
	select {
	case <-r.d.stopping:
		return nil, false
	default:
	}
	now := r.d.cfg.Clock.Now()
	if m := r.d.m; m != nil {
		m.Releases.WithLabelValues(r.ds.Name).Inc()
		// Lateness on the local clock: the wait was timed locally from
		// the reply, so compare against when the wait ended.
		m.Lateness.WithLabelValues(r.ds.Name).Observe(max(time.Since(t.Slot), 0).Seconds())
	}
	herr = Call(ctx, h, t)
	if r.ds.Fairness != nil {
		r.fstats.release(t.Key, takenOf(ctx).backlog, now)
	}
	return herr, true
}

// pushBack moves the bucket's next_free past now+pause for every process:
// the downstream asked to wait.
func (r *runner) pushBack(ctx context.Context, pause time.Duration) {
	if m := r.d.m; m != nil {
		m.Pushbacks.WithLabelValues(r.ds.Name).Inc()
	}
	res, err := r.d.buckets.pushBack(ctx, r.bucket(), pause)
	if err != nil {
		r.d.log.Warn("shaping: pushback failed", "downstream", r.ds.Name, "err", err)
		return
	}
	// the slots the downstream asked to skip end at now+pause; slots past
	// that (next_free may already have been further) stand
	until := res.Now.Add(pause)
	if res.NextFree.Before(until) {
		until = res.NextFree // cut to max_hold, or the bucket's bound
	}
	r.push.pushed(until)
}

// hold counts the tasks this process holds for the downstream.
func (r *runner) hold(delta int64) {
	n := r.held.Add(delta)
	if m := r.d.m; m != nil {
		m.Held.WithLabelValues(r.ds.Name).Set(float64(n))
	}
}
