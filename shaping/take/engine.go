package take

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shaper-io/shaper/internal/lua"
)

// Engine takes tasks from the asynq queues of its downstreams, each only
// with a reserved slot, and calls each downstream's handler at the slot.
// One loop serves every downstream; each has its own budget of tasks
// leased (Downstream.InFlight), so a slow one never starves another.
//
// Create it with New, Add downstreams (before or during Run), and Run it.
// Its methods are safe for concurrent use.
type Engine struct {
	cfg   Config
	store *lua.Store

	mu      sync.Mutex
	added   []*lane
	names   map[string]bool
	running bool
	addSig  chan struct{}
	wakes   chan string
	freed   chan string // Freed's names

	events chan func() // applied by the loop goroutine, which owns every lane
	ops    chan func() // Redis calls, run by cfg.Workers goroutines

	stopping atomic.Bool
	stopCh   chan struct{} // closed when shutdown begins
	quiesced chan struct{} // closed by the loop once it starts no more takes
	callCtx  context.Context
	cancel   context.CancelFunc // cancels callCtx after the shutdown timeout
	jobs     sync.WaitGroup
	held     sync.Map // task id → *job, from its take until it is finished (Cancel)

	stats counters
	order atomic.Int64 // the last Task.Order given

	logMu      sync.Mutex
	logLast    map[string]time.Time
	logDropped map[string]int
}

// ErrRunning is returned by Run when the engine already runs or ran.
var ErrRunning = errors.New("take: the engine already ran")

// New returns an Engine with cfg's defaults filled in.
func New(cfg Config) (*Engine, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	callCtx, cancel := context.WithCancel(context.Background())
	return &Engine{cfg: cfg, store: lua.New(cfg.Redis), names: map[string]bool{},
		addSig: make(chan struct{}, 1), wakes: make(chan string, 256), freed: make(chan string, 256),
		events: make(chan func(), 4096), ops: make(chan func(), 4096),
		stopCh: make(chan struct{}), quiesced: make(chan struct{}), callCtx: callCtx, cancel: cancel,
		logLast: map[string]time.Time{}, logDropped: map[string]int{}}, nil
}

// Add adds a downstream. Its queue must not also be served by an
// asynq.Server: the engine dequeues, forwards and recovers that queue.
func (e *Engine) Add(d Downstream) error {
	if err := d.validate(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.names[d.Name] {
		return errors.New("take: downstream " + d.Name + " added twice")
	}
	e.names[d.Name] = true
	e.added = append(e.added, newLane(e.cfg, d.withDefaults()))
	select {
	case e.addSig <- struct{}{}:
	default:
	}
	return nil
}

// Wake tells the engine that downstream name may have new work, so it
// takes at once instead of at its next idle check. A producer in the same
// process calls it after enqueueing; it never blocks and may be dropped.
func (e *Engine) Wake(name string) {
	select {
	case e.wakes <- name:
	default:
	}
}

// Freed tells the engine that a place among downstream name's calls in
// flight was freed: its next take comes at once if its last one found
// every task waiting held by a cap (full) or none to take; else the take
// already due serves it.
func (e *Engine) Freed(name string) {
	select {
	case e.freed <- name:
	default:
	}
}

// Run serves the downstreams until ctx ends, then shuts down: it takes no
// more, gives back each task still waiting for its slot, waits up to
// Config.ShutdownTimeout for calls in progress, cancels their contexts,
// and waits for them to return. It returns nil after a shutdown.
func (e *Engine) Run(ctx context.Context) error {
	e.mu.Lock()
	if e.running {
		e.mu.Unlock()
		return ErrRunning
	}
	e.running = true
	e.mu.Unlock()

	var workers sync.WaitGroup
	for range e.cfg.Workers {
		workers.Go(func() {
			for op := range e.ops {
				op()
			}
		})
	}
	listenCtx, stopListen := context.WithCancel(context.Background())
	defer stopListen()
	subscribed := make(chan struct{})
	go e.listen(listenCtx, subscribed)
	// take nothing before the subscription stands, so a cancel of any
	// task this engine takes reaches it (a Redis away: go on after a while)
	select {
	case <-subscribed:
	case <-time.After(opTimeout):
	case <-ctx.Done():
	}
	loopCtx, stopLoop := context.WithCancel(context.Background())
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		e.loop(loopCtx)
	}()

	<-ctx.Done()
	e.stopping.Store(true)
	close(e.stopCh)
	<-e.quiesced // every jobs.Add from here on happens while a take holds the count above 0
	if !waitTimeout(&e.jobs, e.cfg.ShutdownTimeout) {
		e.cancel()
		e.jobs.Wait()
	}
	e.cancel()
	stopLoop()
	<-loopDone
	close(e.ops)
	workers.Wait()
	return nil
}

// waitTimeout waits for wg, and reports false if d passed first.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// errLogEvery spaces the log lines of one kind of failed Redis call: with
// Redis away, every take and probe fails, and one line every so often
// (with how many were not logged) says it.
const errLogEvery = 30 * time.Second

// warnRedis logs a failed Redis call of kind msg, at most once per
// errLogEvery per kind, saying how many were left out since.
func (e *Engine) warnRedis(msg string, args ...any) {
	e.logMu.Lock()
	now := time.Now()
	if last, ok := e.logLast[msg]; ok && now.Sub(last) < errLogEvery {
		e.logDropped[msg]++
		e.logMu.Unlock()
		return
	}
	e.logLast[msg] = now
	if n := e.logDropped[msg]; n > 0 {
		args = append(args, "not_logged_since", n)
	}
	e.logDropped[msg] = 0
	e.logMu.Unlock()
	e.cfg.Logger.Warn(msg, args...)
}

// redisError counts a failed Redis call and tells the hook.
func (e *Engine) redisError() {
	e.stats.errors.Add(1)
	if h := e.cfg.Hooks.RedisError; h != nil {
		h()
	}
}

// post hands f to the loop goroutine.
func (e *Engine) post(f func()) { e.events <- f }

// Stats are an engine's counts since New, over every downstream.
type Stats struct {
	// Takes counts take.lua calls; Taken the tasks they took.
	Takes, Taken int64
	// Probes counts idle checks (one LLEN each).
	Probes int64
	// Done, Retried and Archived count finished tasks; Requeued those given
	// back unstarted (to pending, or a paused key's to its held set); Lost those whose lease was gone when they finished
	// (recovered meanwhile: someone else delivers them).
	Done, Retried, Archived, Requeued, Lost int64
	// Recovered counts tasks put back from expired leases; Forwarded those
	// moved from scheduled or retry to pending.
	Recovered, Forwarded int64
	// LateSkips counts jobs woken past their slot's LateTolerance, whose
	// tasks were given back (also counted in Requeued).
	LateSkips int64
	// Errors counts Redis calls that failed.
	Errors int64
	// Cancelled counts tasks removed by Cancel.
	Cancelled int64
	// Retaken counts tasks taken again while a job for them was still
	// here (retaken in loop.go).
	Retaken int64
}

type counters struct {
	takes, taken, probes, done, retried, archived, requeued, lost, recovered, forwarded, lateSkips, errors, cancelled, retaken atomic.Int64
}

// Stats returns the engine's counts.
func (e *Engine) Stats() Stats {
	c := &e.stats
	return Stats{Takes: c.takes.Load(), Taken: c.taken.Load(), Probes: c.probes.Load(), Done: c.done.Load(),
		Retried: c.retried.Load(), Archived: c.archived.Load(), Requeued: c.requeued.Load(), Lost: c.lost.Load(),
		Recovered: c.recovered.Load(), Forwarded: c.forwarded.Load(), LateSkips: c.lateSkips.Load(), Errors: c.errors.Load(),
		Cancelled: c.cancelled.Load(), Retaken: c.retaken.Load()}
}
