package shaping

import (
	"context"
	"errors"
	"fmt"
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
		return d.eng.Add(r.takeDownstream())
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
	r.srv = asynq.NewServerFromRedisClient(asynqClient{UniversalClient: d.rdb, r: r}, acfg)
	return r.srv.Start(q.guard(r, r.process))
}

// engineExtend is how often the engine extends its leases: asynq's
// heartbeat, which the liveness scan's staleness rule is sized for
// (RecoverAfter is at least 6s).
const engineExtend = 5 * time.Second

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
// r's workers (the budget across the fleet is workers per live process). A FIFO downstream's takes are
// paced at its rate in force (the engine's look-ahead of slots), so that
// what waits for a slot in the release path is about the look-ahead, not
// the whole budget; the release path's bucket (quotas, announced limits,
// costs) still decides each slot. A fair downstream, or one with a cap
// per key, takes by the budget alone: its lane picks among the tasks it
// holds (keys at their ceiling or cap are passed over).
func (r *runner) takeDownstream() take.Downstream {
	d := take.Downstream{Name: r.ds.Name, InFlight: r.ds.Workers, LateTolerance: -1,
		Handler: r.serveTake, Gate: r.takeGate,
		BudgetNow: func() int { return r.ds.Workers * int(max(r.d.procs.Load(), 1)) }}
	if r.ds.Fairness == nil && r.ds.KeyConcurrency == 0 {
		d.NoSlotWait, d.Burst = true, int(max(r.ds.Burst, 1))
		d.RateNow = r.takeRate
		r.paced = true
	}
	return d
}

// takeRate is the rate the engine paces r's takes at: the bucket's
// spacing of a unit of cost (the rate in force, with its slack and spread
// quotas), so that takes never run ahead of the slots; none in shadow
// mode (nothing is held back there).
func (r *runner) takeRate() float64 {
	if r.inShadow() {
		return 0
	}
	iv, ok := r.bucket().interval(1)
	if !ok || iv <= 0 {
		return r.rate.Load().PerSec()
	}
	return 1e6 / float64(iv)
}

// gateRecheck is how often a closed gate is asked again when no wake
// comes (a wake comes with every control change this process sees).
const gateRecheck = 250 * time.Millisecond

// takeGate says when the engine may take r's tasks (zero: now). Tasks
// already taken wait in the release path; none leaves the queue while a
// pause, an open breaker or a downstream's hold lasts.
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

// errGiveBack: serve ends without a call, and the task goes back to the
// head of its queue with no attempt consumed.
var errGiveBack = errors.New("shaping: task given back")

// serveTake is the engine's handler for r.
func (r *runner) serveTake(ctx context.Context, t *take.Task) error {
	if t.Type == "" {
		r.outcome("malformed")
		return fmt.Errorf("shaping: downstream %q: task %q has no type (corrupt msg): %w", r.ds.Name, t.ID, asynq.SkipRetry)
	}
	err := r.serve(ctx, asynq.NewTaskWithHeaders(t.Type, t.Payload, t.Headers), t.ID, t.Retried)
	if errors.Is(err, errGiveBack) {
		return take.ErrRequeue
	}
	return err
}
