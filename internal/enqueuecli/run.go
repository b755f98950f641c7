package enqueuecli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/plan"
	"github.com/shaper-io/shaper/internal/redisconn"
	"github.com/shaper-io/shaper/internal/taskspec"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
)

// runner is one invocation.
type runner struct {
	o        *options
	std      IO
	con      *console
	cfg      *config.Config
	redis    redisconn.Options // how rdb was reached
	rdb      redis.UniversalClient
	closeRDB func()
	p        *queue.Producer
	maxLine  int
	source   string    // "stdin" or the file name, for messages
	in       io.Reader // JSON Lines input
	inFile   *os.File
	rejects  io.WriteCloser
	led      *ledger

	mu        sync.Mutex
	sum       Summary
	firstRej  time.Time
	lastRetry time.Time
	redisDown bool
	stopErr   string // the error that stopped the run, for its stderr line
	read      int64
	total     int64
}

// setupError is a failure before any task is read: one line, one code.
type setupError struct {
	code int
	msg  string
}

// setup loads the config, connects, builds the producer and opens the
// input and output files.
func setup(o *options, std IO, con *console) (*runner, *setupError) {
	bad := func(format string, args ...any) *setupError {
		return &setupError{ExitBadInput, oneLine(fmt.Sprintf(format, args...))}
	}
	cfg, err := loadConfig(o)
	if err != nil {
		return nil, bad("%s", err)
	}
	r := &runner{o: o, std: std, con: con, cfg: cfg, source: "stdin", in: std.Stdin}
	fail := func(e *setupError) (*runner, *setupError) {
		r.close()
		return nil, e
	}
	pl, err := plan.Build(cfg)
	if err != nil {
		return fail(bad("%s", err))
	}
	r.redis = pl.Redis
	if o.dryRun {
		// Nothing below talks to Redis: limiters and the producer only
		// connect on first use.
		c := redis.NewClient(&redis.Options{Addr: "dry-run.invalid:0"})
		r.rdb, r.closeRDB = c, func() { c.Close() }
	} else {
		if pl.Redis.Embedded() {
			return fail(bad("the config names no Redis (redis.url, redis.cluster or redis.sentinel); shaper's embedded Redis lives inside one shaper process, so enqueue cannot reach it: set one, or pass --redis"))
		}
		rdb, closeRDB, err := redisconn.Open(pl.Redis)
		if err != nil {
			return fail(bad("%s", err))
		}
		r.rdb, r.closeRDB = rdb, closeRDB
	}
	pl.Producer.Predict = o.single() && o.json // the summary's expected_start
	p, err := pl.NewProducer(r.rdb, nil)
	if err != nil {
		return fail(bad("%s", err))
	}
	r.p = p
	maxPayload := int(pl.MaxBody)
	if maxPayload <= 0 {
		maxPayload = int(config.DefaultMaxBody)
	}
	r.maxLine = 2*maxPayload + 64<<10
	if !o.single() && o.file != "" && o.file != "-" {
		f, err := os.Open(o.file)
		if err != nil {
			return fail(bad("--file: %s", err))
		}
		r.in, r.inFile, r.source = f, f, o.file
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			r.total = fi.Size()
		}
	}
	if !o.dryRun {
		if err := r.ping(); err != nil {
			return fail(&setupError{ExitRedis, oneLine(fmt.Sprintf("redis unreachable (%s): %s", pl.Redis.String(), err))})
		}
	}
	if o.rejects != "" && !o.dryRun {
		f, err := os.Create(o.rejects)
		if err != nil {
			return fail(bad("--rejects: %s", err))
		}
		r.rejects = f
	}
	return r, nil
}

func (r *runner) close() {
	if r.inFile != nil {
		r.inFile.Close()
	}
	if r.p != nil {
		r.p.Close()
	}
	if r.rejects != nil {
		r.rejects.Close()
	}
	if r.closeRDB != nil {
		r.closeRDB()
	}
}

// ping checks Redis. It allows at least 3s: the client retries a refused
// connection a few times, and the last error says more than a deadline.
func (r *runner) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), max(r.redis.Timeout, 3*time.Second))
	defer cancel()
	return r.rdb.Ping(ctx).Err()
}

func (r *runner) run(ctx context.Context) int {
	start := time.Now()
	if r.o.single() {
		r.runSingle(ctx)
	} else {
		r.runLines(ctx)
	}
	r.mu.Lock()
	s := r.sum
	r.mu.Unlock()
	s.Enqueued = s.Accepted + s.Deferred
	s.DryRun = r.o.dryRun
	s.ElapsedSeconds = time.Since(start).Seconds()
	if !r.lastRetry.IsZero() {
		v := max(time.Until(r.lastRetry), 0).Seconds()
		s.MaxRetryAfter = &v
	}
	s.ExitCode = r.exitCode(s)
	if r.o.json {
		writeJSON(r.std.Stdout, s)
	} else if !r.o.quiet && !r.o.single() {
		r.con.line("enqueue: %s", humanSummary(s))
	}
	return s.ExitCode
}

func (r *runner) exitCode(s Summary) int {
	switch {
	case s.Interrupted:
		return ExitInterrupted
	case r.redisDown:
		return ExitRedis
	case s.Invalid > 0:
		return ExitBadInput
	case s.Failed > 0, s.Uncertain > 0, s.Duplicates > 0 && !r.o.skipDuplicates:
		return ExitFailed
	case s.Rejected > 0, s.Late > 0:
		return ExitRejected
	}
	return ExitOK
}

// ---- one task ----

func (r *runner) runSingle(ctx context.Context) {
	r.count(func(s *Summary) { s.Tasks++ })
	spec := r.o.defaults
	if r.o.payloadSet {
		spec.Payload = []byte(r.o.payload)
	} else {
		var b []byte
		var err error
		if r.o.payloadFile == "-" {
			b, err = io.ReadAll(io.LimitReader(r.std.Stdin, int64(r.maxLine)))
		} else {
			b, err = os.ReadFile(r.o.payloadFile)
		}
		if err != nil {
			r.invalid("", 0, "--payload-file: "+oneLine(err.Error()))
			return
		}
		spec.Payload = b
	}
	if spec.Payload == nil {
		spec.Payload = []byte{}
	}
	if r.o.unique != "" {
		u := r.o.unique
		spec.Unique = &u
	}
	task, err := r.check(spec, true)
	if err != nil {
		r.invalid("", 0, err.Error())
		return
	}
	if r.o.dryRun {
		if !r.o.json && !r.o.quiet {
			r.con.line("enqueue: dry run: the task for %s is valid (cost %d, key %q); nothing enqueued, no Redis contacted",
				task.Downstream, max(task.Cost, 1), task.Key)
		}
		return
	}
	r.enqueue(ctx, job{spec: spec, task: task})
}

func (r *runner) count(f func(*Summary)) {
	r.mu.Lock()
	f(&r.sum)
	r.mu.Unlock()
}

func (r *runner) progressStats() progressStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sum
	return progressStats{tasks: s.Tasks, accepted: s.Accepted, deferred: s.Deferred, rejected: s.Rejected,
		collapsed: s.Collapsed, invalid: s.Invalid, failed: s.Failed + s.Duplicates, read: r.read, total: r.total}
}

// check builds and validates a task without Redis: the fields, the
// downstream, the payload size, and a cost no limiter could ever admit.
func (r *runner) check(spec taskspec.Spec, single bool) (queue.Task, error) {
	if spec.Downstream == nil || *spec.Downstream == "" {
		if single {
			return queue.Task{}, errors.New("--downstream is required")
		}
		return queue.Task{}, errors.New("downstream: required (set \"downstream\" in the line, or --downstream)")
	}
	task, err := spec.Task(time.Now())
	if err != nil {
		return task, err
	}
	if err := r.p.Validate(task); err != nil {
		msg := taskspec.Reason(err)
		if errors.Is(err, queue.ErrUnknownDownstream) && len(r.cfg.Downstreams) > 0 {
			names := make([]string, 0, len(r.cfg.Downstreams))
			for _, d := range r.cfg.Downstreams {
				names = append(names, d.Name)
			}
			msg += " (the config has " + strings.Join(names, ", ") + ")"
		}
		return task, errors.New(msg)
	}
	if ds, ok := r.cfg.Downstream(task.Downstream); ok && ds.Admission != nil {
		cost := max(task.Cost, 1)
		for i, l := range ds.Admission.Limiters {
			if c := l.Limit().Capacity(); cost > c {
				name := l.Name
				if name == "" {
					name = fmt.Sprintf("%s-%d", ds.Name, i)
				}
				return task, fmt.Errorf("cost: %d exceeds the capacity %d of %s %q, so it could never be admitted", cost, c, l.Algorithm, name)
			}
		}
	}
	return task, nil
}

func (r *runner) where(line int) string {
	if line == 0 {
		return ""
	}
	return fmt.Sprintf("%s:%d: ", r.source, line)
}

func (r *runner) invalid(source string, line int, msg string) {
	r.count(func(s *Summary) { s.Invalid++ })
	if source != "" && line > 0 {
		r.con.line("enqueue: %s:%d: %s", source, line, oneLine(msg))
	} else {
		r.con.line("enqueue: %s", oneLine(msg))
	}
}

// enqueue runs one task and counts its outcome, which it returns, with
// false when the run must stop (Redis unreachable).
func (r *runner) enqueue(ctx context.Context, j job) (outcome, bool) {
	now := time.Now()
	rec, err := r.p.Enqueue(ctx, j.task)
	at := r.where(j.line)
	switch {
	case rec.Outcome.Enqueued():
		r.countEnqueued(rec, at)
		return enqueued, true
	case rec.Outcome == queue.Collapsed:
		r.countCollapsed(j, rec, at)
		return handled, true
	case errors.Is(err, limiters.ErrFailedClosed):
		r.stop(j, "redis unreachable (admission failed closed: "+rejName(err)+" could not decide)", err, false)
		return open, false
	case rec.Outcome == queue.Rejected:
		r.countRejected(j, rec.Admission, now, at)
		return handled, true
	case rec.Outcome == queue.Late:
		r.count(func(s *Summary) { s.Late++ })
		r.con.line("enqueue: %s%s", at, lateReason(err))
		return handled, true
	case errors.Is(err, queue.ErrUnknownDownstream), errors.Is(err, queue.ErrInvalidTask),
		errors.Is(err, limiters.ErrCostExceedsCapacity), errors.Is(err, limiters.ErrInvalidCost):
		r.invalid(r.source, j.line, taskspec.Reason(err))
		return handled, true
	case ctx.Err() != nil:
		r.count(func(s *Summary) { s.Interrupted = true })
		return open, false
	case rec.Outcome == queue.Duplicate:
		r.count(func(s *Summary) { s.Duplicates++ })
		if !r.o.skipDuplicates || r.o.verbose {
			r.con.line("enqueue: %sduplicate: a task with unique key %q exists", at, j.task.UniqueKey)
		}
		return handled, true
	}
	return r.notEnqueued(j, rec, err, at)
}

// countEnqueued counts and reports a task that is in the queue, and whether
// its admission failed open.
func (r *runner) countEnqueued(rec queue.Receipt, at string) {
	failedOpen := rec.Admission.FailedOpen
	r.count(func(s *Summary) {
		if rec.Outcome == queue.Deferred {
			s.Deferred++
		} else {
			s.Accepted++
		}
		if failedOpen {
			s.FailedOpen++
		}
		if r.o.single() {
			s.ID = rec.ID
			pa := rec.ProcessAt
			s.ProcessAt = &pa
			s.Priority = rec.Priority
			if es := rec.ExpectedStart; !es.IsZero() {
				s.ExpectedStart = &es
			}
		}
	})
	if r.o.single() && !r.o.json {
		fmt.Fprintln(r.std.Stdout, rec.ID)
	}
	switch {
	case rec.Outcome == queue.Deferred && (r.o.verbose || r.o.single() && !r.o.quiet):
		r.con.line("enqueue: %sdeferred %s: rejected for now by %s %q, runs at %s (Retry-After %s)", at, rec.ID,
			rec.Admission.Algorithm, rec.Admission.Name, rec.ProcessAt.Format(time.RFC3339Nano), rec.Admission.RetryAfter.Round(time.Millisecond))
	case r.o.verbose:
		r.con.line("enqueue: %saccepted %s", at, rec.ID)
	}
	if failedOpen && (r.o.verbose || r.o.single()) {
		why := "failed open"
		if c := rec.Admission.Cause; c != nil {
			why = c.Error()
		}
		r.con.line("enqueue: %sadmitted without a decision: %s", at, oneLine(why))
	}
}

// countCollapsed counts and reports a task collapsed into the waiting task
// that holds its collapse key. For the one task, that task's id goes to
// stdout as an enqueued task's would.
func (r *runner) countCollapsed(j job, rec queue.Receipt, at string) {
	r.count(func(s *Summary) {
		s.Collapsed++
		if r.o.single() {
			s.ID, s.CollapsedInto = rec.ID, rec.CollapsedInto
		}
	})
	if r.o.single() && !r.o.json {
		fmt.Fprintln(r.std.Stdout, rec.ID)
	}
	if r.o.verbose || r.o.single() && !r.o.quiet {
		r.con.line("enqueue: %scollapsed into %s: a task with collapse key %q still waits", at, rec.CollapsedInto, j.task.CollapseKey)
	}
}

// countRejected counts a task that admission refused at now, keeps its line for
// --rejects and the Retry-After for the summary.
func (r *runner) countRejected(j job, res limiters.Result, now time.Time, at string) {
	retry := res.RetryAfter
	r.count(func(s *Summary) {
		s.Rejected++
		if s.FirstRetryAfter == nil {
			v := retry.Seconds()
			s.FirstRetryAfter = &v
			t := now.Add(retry)
			s.FirstRetryAt = &t
		}
		if t := now.Add(retry); t.After(r.lastRetry) {
			r.lastRetry = t
		}
		if r.rejects != nil {
			r.rejects.Write(append(slices.Clone(j.raw), '\n'))
		}
	})
	if r.o.verbose || r.o.single() {
		r.con.line("enqueue: %srejected by %s %q: Retry-After %s", at, res.Algorithm, res.Name, retry.Round(time.Millisecond))
	}
}

// notEnqueued handles a Redis failure: the run stops if Redis is
// unreachable; otherwise the task counts as failed, or as uncertain when
// it was sent and may be stored.
func (r *runner) notEnqueued(j job, rec queue.Receipt, err error, at string) (outcome, bool) {
	sent := mayBeStored(err)
	if r.ping() != nil {
		why := "redis unreachable"
		if rec.Admission.Allowed && rec.Admission.Name != "" {
			// fail_open lets a task through when Redis is gone; the
			// enqueue then fails on the same Redis.
			why += fmt.Sprintf(" (admission by %s %q let the task through, then the enqueue failed)", rec.Admission.Algorithm, rec.Admission.Name)
		}
		r.stop(j, why, err, sent)
		if sent {
			return unknown, false
		}
		return open, false
	}
	r.count(func(s *Summary) {
		if sent {
			s.Uncertain++
		} else {
			s.Failed++
		}
		if s.Error == "" {
			s.Error = oneLine(err.Error())
		}
	})
	if sent {
		r.con.line("enqueue: %soutcome unknown, the task may or may not be stored (sent, then: %s)", at, oneLine(err.Error()))
		return unknown, true
	}
	r.con.line("enqueue: %snot enqueued: %s", at, oneLine(err.Error()))
	return handled, true
}

func rejName(err error) string {
	var rej *queue.RejectedError
	if errors.As(err, &rej) {
		return fmt.Sprintf("%s %q", rej.Result.Algorithm, rej.Result.Name)
	}
	return "the limiter"
}

// stop records that Redis is unreachable at job j, which was sent (and
// may be stored) or not. The first call keeps the reason; JSON Lines runs
// report it once all workers are done (reportStop), a single task at once.
func (r *runner) stop(j job, why string, err error, sent bool) {
	first := false
	r.count(func(s *Summary) {
		if sent {
			s.Uncertain++
		} else {
			s.Failed++
		}
		if !r.redisDown {
			first, r.redisDown = true, true
			s.Error, r.stopErr = why, oneLine(err.Error())
		}
	})
	if first && r.o.single() {
		msg := why + ": " + oneLine(err.Error())
		if sent {
			msg += "; the task was sent, so it may or may not be stored"
		}
		r.con.line("enqueue: %s", msg)
	}
}

// lateReason is the line for a task refused as late.
func lateReason(err error) string {
	var le *queue.LateError
	if !errors.As(err, &le) {
		return oneLine(err.Error())
	}
	return fmt.Sprintf("refused: predicted start %s is %s past the deadline %s (on_late: reject)",
		le.ExpectedStart.UTC().Format(time.RFC3339Nano), le.ExpectedStart.Sub(le.Deadline).Round(time.Millisecond),
		le.Deadline.UTC().Format(time.RFC3339Nano))
}
