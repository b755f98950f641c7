package take

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/priority"
)

// Config configures an Engine. Zero values take the defaults named.
type Config struct {
	// Redis is the client every script runs on; required.
	Redis redis.UniversalClient
	// Keys names the keys (zero: keys.DefaultPrefix).
	Keys keys.Space
	// LookAhead is how far ahead of its slot a task may be taken (default
	// 150ms). A take is made when the next slot starts within LookAhead/3
	// and serves every slot that starts within LookAhead, so a downstream
	// at rate r costs about one take per (2/3)·LookAhead·r releases, and a
	// crash strands at most LookAhead·r + 1 tasks besides those in calls
	// (and never more than the downstream's InFlight).
	LookAhead time.Duration
	// Lease is each taken task's lease (default 30s, asynq's); the engine
	// extends it every Extend while it holds the task, and a task whose
	// lease expired is put back to pending by the next maintenance take.
	Lease time.Duration
	// Extend is how often held leases are extended (default Lease/3, at
	// most Lease/2). A recoverer that takes back leases unextended for a
	// while (shaping's liveness scan) needs it well under that while.
	Extend time.Duration
	// IdlePoll is how often a downstream with nothing to take is checked
	// again (default 1s): one LLEN, pipelined with the others. A
	// downstream that just emptied is checked sooner, backing off to it.
	IdlePoll time.Duration
	// Maintain is how often each downstream's take also forwards due
	// scheduled and retry tasks and recovers expired leases (default 5s,
	// asynq's forwarder interval).
	Maintain time.Duration
	// ShutdownTimeout is how long Run waits, once its context ends, for
	// calls in progress before it cancels their contexts (default 8s,
	// asynq's).
	ShutdownTimeout time.Duration
	// Workers is how many goroutines run takes, probes and lease
	// extensions (default 4); it bounds the idle engine's connections.
	Workers int
	// Logger receives errors the engine handles (default slog.Default()).
	Logger *slog.Logger
	// Hooks, when set, are told of events as they happen (metrics).
	Hooks Hooks
	// Follow names further pub/sub channels the engine's one subscription
	// (asynq's cancellation channel) follows, each with the func that gets
	// its messages' payloads: the process needs no second connection for
	// them. Each func is called from the subscription's goroutine and must
	// be quick.
	Follow map[string]func(payload string)
}

// Hooks are called from the engine's goroutines; each must be quick and
// safe for concurrent use. A nil hook is skipped.
type Hooks struct {
	// RedisError: a take, probe, extension or finishing write failed on
	// Redis (a lost reply may have left tasks under a lease nobody
	// extends until it expires).
	RedisError func()
	// FinishRetry: a finishing write of downstream's task failed and is
	// tried again.
	FinishRetry func(downstream string)
	// Cancelled: a task of downstream was cancelled (asynq's cancellation
	// channel) before its handler was called, while it waited for its
	// slot, and removed unsent.
	Cancelled func(downstream string)
}

func (c Config) withDefaults() Config {
	c.LookAhead = cmp.Or(c.LookAhead, 150*time.Millisecond)
	c.Lease = cmp.Or(c.Lease, 30*time.Second)
	c.Extend = cmp.Or(c.Extend, c.Lease/3)
	c.IdlePoll = cmp.Or(c.IdlePoll, time.Second)
	c.Maintain = cmp.Or(c.Maintain, 5*time.Second)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, 8*time.Second)
	c.Workers = cmp.Or(c.Workers, 4)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return c
}

func (c Config) validate() error {
	switch {
	case c.Redis == nil:
		return errors.New("take: Config.Redis is required")
	case c.LookAhead < 0 || c.LookAhead > time.Minute:
		return fmt.Errorf("take: Config.LookAhead must be in [0, 1m], got %v", c.LookAhead)
	case c.Lease < 2*time.Second:
		return fmt.Errorf("take: Config.Lease must be at least 2s (leases count whole seconds), got %v", c.Lease)
	case c.Extend < 0 || c.Extend > c.Lease/2:
		return fmt.Errorf("take: Config.Extend must be in (0, Lease/2], got %v", c.Extend)
	case c.IdlePoll < 0 || c.Maintain < 0 || c.ShutdownTimeout < 0 || c.Workers < 0:
		return errors.New("take: Config.IdlePoll, Maintain, ShutdownTimeout and Workers must not be negative")
	}
	return nil
}

// Downstream is one downstream served by an Engine: its asynq queue is
// Keys.Queue(Name).
type Downstream struct {
	// Name is the downstream's name (keys.NameRule); required.
	Name string
	// Rate is the releases per second across every process; 0 is no rate
	// limit (the budget alone paces).
	Rate float64
	// Malformed, when set, is handed each task taken whose message cannot
	// be read (id, the raw msg): true means it took the task out of the
	// queue itself (a quarantine of its own), and the engine writes
	// nothing; false, or nil, and the engine archives it with the reason.
	Malformed func(id string, msg []byte) bool
	// Want, when set, is asked before each take how many tasks the
	// handler side wants now (such as a release path of its own that
	// keeps a few tasks ahead of its slots): a take asks for no more, and
	// none is made while it is 0; Wake asks again.
	Want func() int
	// Burst is how many releases may go at once after an idle spell
	// (default 1: evenly spaced).
	Burst int
	// InFlight is the budget of tasks the downstream's queue may hold
	// leased across every process (taken and waiting for a slot, or in a
	// call), default 1. It isolates the downstream from the others and
	// caps what a pause or a throttle leaves active. It is also the most
	// this process holds.
	InFlight int
	// BudgetNow, when set, is asked for the budget across every process
	// at each take in place of InFlight (such as InFlight per live
	// process); this process still holds at most InFlight.
	BudgetNow func() int
	// LateTolerance is how late after its slot a call may still start; a
	// job woken later (a starved CPU, a GC pause) wastes the slot and
	// gives its task back to the head of pending rather than bunch up with
	// the next releases (Stats.LateSkips). Zero means half a slot, at
	// least 5ms; negative means never skip. With a tolerance of t, any
	// window T holds at most rate·(T + t) + 1 releases.
	LateTolerance time.Duration
	// Handler calls the downstream; required.
	Handler Handler
	// RetryDelay is the wait before retry n+1 after err (default asynq's
	// DefaultRetryDelayFunc).
	RetryDelay func(n int, err error, t *Task) time.Duration
	// IsFailure reports whether err counts as a failure: a retry that is
	// not one consumes no attempt (default: every error is one).
	IsFailure func(err error) bool
	// Priority serves the downstream's tasks by priority
	// (internal/priority): 1 and 2 before asynq's pending list (priority
	// 3), 4 and 5 after, each first in, first out, from lists of their own
	// (keys.Space.TakePriority) that the producer fills. Without it a
	// take serves pending alone, and an idle check costs one command in
	// place of one over five lists.
	Priority bool
	// Weights, with Priority, serves the levels by weight instead of
	// strictly in order (internal/priority.Weights): among the levels
	// with tasks waiting, each gets takes in proportion to its weight,
	// decided in take.lua on a state in Redis
	// (keys.Space.TakeTurns) that every process shares. The zero value
	// is strict priority.
	Weights priority.Weights
	// Fair serves the downstream's tasks in weighted fair order among its
	// admission keys (internal/fairindex parks them, fair.lua's keys
	// under keys.Space.Fair): once pending is empty, a take moves the
	// parked task with the least start tag to active, so the order is
	// decided at the take and a key that arrives passes the backlog at
	// the next take.
	Fair bool
	// InLine says the handler calls InLine(ctx) once its task has its
	// place in line (shaping's lane): the handler of the next task of the
	// same take is called only then, or once this one returns, so the
	// tasks of one take queue in take order whatever order their
	// goroutines run in. Without it the next handler is called as soon
	// as this one is.
	InLine bool
	// Gate, when set, is asked before each take or idle check whether the
	// downstream may take now: a zero time means yes, a later one means
	// not before then (a pause, an open breaker, a hold the downstream
	// announced), and nothing leaves the queue meanwhile. Wake asks again
	// at once. It runs on the loop goroutine and must not block.
	Gate func(now time.Time) time.Time
	// Reserve, when set, is asked at each take for the reservation the
	// take makes (shaping's bucket: the rate, burst, quotas and announced
	// limit, a unit of cost per task; its max wait, now and slots are the
	// take's): with ok, a task leaves pending only with its slot reserved
	// on keys.Space.Bucket, in the same script, and Task.Reservation says
	// so; Rate and Burst are not used for that take. Without ok the take
	// reserves nothing (Rate, if any, paces it). With Fair the take
	// reserves in fair order. It runs on the loop goroutine and must not
	// block.
	Reserve func() (lua.BucketArgs, bool)
	// MaxUnits, with Reserve, is the most units of cost a task may have
	// for the take to reserve its slot (a run of tasks of one cost gets a
	// slot of that many units each; Reservation.Units); a task of more is
	// taken without a slot. 0: only tasks of one unit are reserved.
	MaxUnits int64
	// Ceiling, when set, is asked with each reservation on a Fair
	// downstream for its per-key ceilings, decided in the same script
	// (nil: none). It runs on the loop goroutine and must not block.
	Ceiling func() *lua.TakeCeiling
	// Leases, when set, is asked with each reservation for the
	// downstream's cap on calls in flight, decided in the same script
	// (nil: none; its Token is set per take): each task taken then holds
	// a lease (Reservation.Lease). It runs on the loop goroutine and must
	// not block.
	Leases func() *lua.TakeLeases
	// Unheld, with Leases, is given the lease of a task whose handler is
	// never called (shutdown before its slot, a message that cannot be
	// decoded, a cancel before its call), so that its place is freed now
	// rather than when the lease expires.
	Unheld func(lease string)
	// Pause, with Reserve, is the downstream's pause as the take script
	// checks it (nil: not checked there), so that no process takes once
	// the downstream is paused, whether or not its Gate knows yet.
	Pause *lua.TakePause
	// LookAhead, when set, is this downstream's look-ahead in place of
	// Config.LookAhead (such as a shorter one, so that a task of a higher
	// priority that arrives waits behind fewer slots already reserved).
	LookAhead time.Duration
	// Lead, when set, is how far ahead the next slot must start for a
	// take to be made, in place of a third of the look-ahead (a take then
	// serves the slots from Lead to the look-ahead). At most LookAhead.
	Lead time.Duration
	// Reserved, when set, is told what each take's reservation found
	// (the slots, what held them, the quotas' use), on the loop
	// goroutine; it must not block.
	Reserved func(lua.BucketReply)
}

// interval is the µs between two slots (0: no rate limit).
func (d Downstream) interval() int64 {
	if d.Rate <= 0 {
		return 0
	}
	return int64(math.Ceil(1e6 / d.Rate))
}

func (d Downstream) withDefaults() Downstream {
	d.Burst = max(d.Burst, 1)
	if d.LateTolerance == 0 {
		d.LateTolerance = max(time.Duration(d.interval())*time.Microsecond/2, 5*time.Millisecond)
	}
	d.InFlight = max(d.InFlight, 1)
	if d.RetryDelay == nil {
		d.RetryDelay = func(n int, err error, t *Task) time.Duration {
			return asynq.DefaultRetryDelayFunc(n, err, asynq.NewTaskWithHeaders(t.Type, t.Payload, t.Headers))
		}
	}
	if d.IsFailure == nil {
		d.IsFailure = func(err error) bool { return err != nil }
	}
	return d
}

func (d Downstream) validate() error {
	switch {
	case !keys.ValidName(d.Name):
		return fmt.Errorf("take: Downstream.Name %q must be %s", d.Name, keys.NameRule)
	case d.Handler == nil:
		return fmt.Errorf("take: downstream %s: Downstream.Handler is required", d.Name)
	case d.Rate < 0 || d.Rate > 1e6 || math.IsNaN(d.Rate):
		return fmt.Errorf("take: downstream %s: Downstream.Rate must be in [0, 1e6], got %v", d.Name, d.Rate)
	case d.Burst < 0 || d.Burst > 1000 || d.InFlight < 0 || d.InFlight > 100000:
		return fmt.Errorf("take: downstream %s: Downstream.Burst must be in [0, 1000] and InFlight in [0, 100000]", d.Name)
	case !d.Weights.Strict() && !d.Priority:
		return fmt.Errorf("take: downstream %s: Downstream.Weights need Priority", d.Name)
	case d.LookAhead < 0 || d.LookAhead > time.Minute:
		return fmt.Errorf("take: downstream %s: Downstream.LookAhead must be in [0, 1m], got %v", d.Name, d.LookAhead)
	case d.Lead < 0 || d.Lead > time.Minute:
		return fmt.Errorf("take: downstream %s: Downstream.Lead must be in [0, 1m], got %v", d.Name, d.Lead)
	case d.Ceiling != nil && (d.Reserve == nil || !d.Fair):
		return fmt.Errorf("take: downstream %s: Downstream.Ceiling needs Reserve and Fair", d.Name)
	case d.Leases != nil && d.Reserve == nil:
		return fmt.Errorf("take: downstream %s: Downstream.Leases needs Reserve", d.Name)
	}
	if err := d.Weights.Validate(); err != nil {
		return fmt.Errorf("take: downstream %s: Downstream.Weights: %w", d.Name, err)
	}
	return nil
}
