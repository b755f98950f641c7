package take

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

	"github.com/shaper-io/shaper/internal/asynqmsg"
	"github.com/shaper-io/shaper/internal/lua"
)

// job is one task taken: it waits for its slot, calls the handler and
// finishes the task in asynq's storage. It never touches its lane's fields;
// it posts its end to the loop.
type job struct {
	e      *Engine
	l      *lane
	tt     lua.TakenTask
	slot   time.Time
	order  int64        // Task.Order
	behind int          // Task.Behind
	state  atomic.Int32 // jobWaiting, then jobStarted (by the job) or jobClaimed (by the loop)
	// cutCtx ends when the task is cancelled (cause ErrCancelled) or
	// finished (released by the loop)
	cutCtx context.Context
	cut    context.CancelCauseFunc
	// prev is closed once the job taken before it in the same take has
	// called its handler (with Downstream.InLine: its handler said InLine)
	// or ended (nil: first of its take); calling is closed when this one
	// has, so one take's handlers are called in take order, whatever
	// order their goroutines run in
	prev, calling chan struct{}
	once          sync.Once
	res           *Reservation // the slot the take reserved, or nil
}

// called closes calling, once.
func (j *job) called() { j.once.Do(func() { close(j.calling) }) }

func newJob(e *Engine, l *lane, tt lua.TakenTask, slot time.Time, behind int) *job {
	j := &job{e: e, l: l, tt: tt, slot: slot, order: e.order.Add(1), behind: behind, calling: make(chan struct{})}
	j.cutCtx, j.cut = context.WithCancelCause(context.Background())
	return j
}

// A job's states: it starts once its slot comes, unless the loop claimed it
// first at shutdown to give it back with its lane's other unstarted tasks.
const (
	jobWaiting int32 = iota
	jobStarted
	jobClaimed
)

func (j *job) run() {
	defer j.called()
	handled := false
	if j.res != nil && j.res.Lease != "" && j.l.d.Unheld != nil {
		defer func() {
			if !handled {
				j.l.d.Unheld(j.res.Lease)
			}
		}()
	}
	if !j.waitSlot() || !j.state.CompareAndSwap(jobWaiting, jobStarted) {
		return // shutdown: the loop claims the job and requeues it (requeueUnstarted)
	}
	j.l.unstarted.Add(-1)
	defer j.e.post(func() { j.e.finished(j.l, j) })
	if tol := j.l.d.LateTolerance; tol >= 0 && time.Since(j.slot) > tol && !j.cancelled() {
		j.e.stats.lateSkips.Add(1)
		j.requeue() // the slot is wasted; the task goes again at a slot of its own
		return
	}
	m, reason := j.decode()
	if reason != "" {
		j.quarantine(reason)
		return
	}
	if j.cancelled() {
		j.remove(m, false)
		return
	}
	t := newTask(m, j.slot, j.order, j.tt.Priority, j.behind)
	t.Reservation, t.Backlog = j.res, j.tt.Left > 0
	ctx, cancel := context.WithDeadline(j.e.callCtx, deadline(m, time.Now()))
	ctx, cancelCall := context.WithCancelCause(ctx)
	stop := context.AfterFunc(j.cutCtx, func() {
		if j.cancelled() {
			cancelCall(ErrCancelled)
		}
	})
	if j.prev != nil {
		select {
		case <-j.prev:
		case <-j.cutCtx.Done():
		}
	}
	if j.l.d.InLine {
		ctx = context.WithValue(ctx, inLineKey{}, j.called)
	} else {
		j.called()
	}
	handled = true
	err := j.call(ctx, t)
	stop()
	cancelCall(nil)
	cancel()
	if err != nil && j.cancelled() {
		j.remove(m, true)
		return
	}
	var h *Hold
	if err != nil && j.e.callCtx.Err() == nil && errors.As(err, &h) && j.l.args.Fair != nil {
		j.hold(h) // its key paused: no attempt consumed
		return
	}
	if err != nil && (j.e.callCtx.Err() != nil || errors.Is(err, ErrRequeue) || h != nil) {
		j.requeue() // cut by shutdown, or given back: no attempt consumed
		return
	}
	j.finish(t, m, err)
}

// decode reads the task's message, or says why it cannot be delivered.
func (j *job) decode() (*asynqmsg.Message, string) {
	if len(j.tt.Msg) == 0 {
		return nil, "shaper: task hash has no message"
	}
	m, err := asynqmsg.Decode(j.tt.Msg)
	if err != nil {
		return nil, "shaper: " + err.Error()
	}
	if m.ID != j.tt.ID {
		return nil, fmt.Sprintf("shaper: message id %q is not the task id", m.ID)
	}
	return m, ""
}

// waitSlot sleeps until the slot; false when shutdown began first.
func (j *job) waitSlot() bool {
	if d := time.Until(j.slot); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-j.cutCtx.Done(): // cancelled: removed at once, without its slot
		case <-j.e.stopCh:
			return false
		}
	}
	return !j.e.stopping.Load()
}

// call runs the handler; a panic is an error of the task, not a crash.
func (j *job) call(ctx context.Context, t *Task) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("take: handler panic: %v", p)
		}
	}()
	return j.l.d.Handler(ctx, t)
}

// finish writes the outcome as asynq's processor would: done (completed
// when the task has a retention; removed on asynq.RevokeTask), archived
// once retries are spent or on asynq.SkipRetry, else retried after the
// downstream's RetryDelay.
func (j *job) finish(t *Task, m *asynqmsg.Message, err error) {
	now := time.Now()
	q, id, d := j.l.q, j.tt.ID, j.l.d
	if err == nil || errors.Is(err, asynq.RevokeTask) {
		a := lua.TakeDoneArgs{Queue: q, ID: id, Day: now, UniqueKey: m.UniqueKey,
			Retention: time.Duration(m.Retention) * time.Second}
		if err != nil {
			a.Retention = 0 // revoked: removed, as asynq's markAsDone
		}
		if a.Retention > 0 {
			a.Msg = m.Completed(now.Unix())
		}
		j.settle("done", &j.e.stats.done, func(ctx context.Context) (bool, error) { return j.e.store.TakeDone(ctx, a) })
		return
	}
	a := lua.TakeFailArgs{Queue: q, ID: id, Day: now, Failure: true}
	if m.Retried >= m.Retry || errors.Is(err, asynq.SkipRetry) {
		a.Archive, a.Msg = true, m.Failed(err.Error(), now.Unix(), false)
		j.settle("archive", &j.e.stats.archived, func(ctx context.Context) (bool, error) { return j.e.store.TakeFail(ctx, a) })
		return
	}
	a.Failure = d.IsFailure(err)
	a.Msg = m.Failed(err.Error(), now.Unix(), a.Failure)
	a.RetryIn = time.Duration(math.Ceil(d.RetryDelay(m.Retried, err, t).Seconds())) * time.Second
	j.settle("retry", &j.e.stats.retried, func(ctx context.Context) (bool, error) { return j.e.store.TakeFail(ctx, a) })
}

// quarantine archives a task whose message cannot be read, with the
// reason, under a message asynq's Inspector can read.
func (j *job) quarantine(reason string) {
	if h := j.l.d.Malformed; h != nil && h(j.tt.ID, j.tt.Msg) {
		j.e.stats.archived.Add(1)
		return
	}
	a := lua.TakeFailArgs{Queue: j.l.q, ID: j.tt.ID, Day: time.Now(), Archive: true, Failure: true,
		Msg: asynqmsg.Quarantined(j.tt.ID, j.l.q.Name, j.tt.Msg, reason, time.Now().Unix())}
	j.e.cfg.Logger.Warn("take: malformed task archived", "downstream", j.l.d.Name, "task", j.tt.ID, "reason", reason)
	j.settle("archive", &j.e.stats.archived, func(ctx context.Context) (bool, error) { return j.e.store.TakeFail(ctx, a) })
}

func (j *job) requeue() {
	j.settle("requeue", &j.e.stats.requeued, func(ctx context.Context) (bool, error) {
		n, err := j.e.store.TakeRequeue(ctx, j.l.q, j.l.levels, j.tt.ID)
		return n == 1, err
	})
}

// hold gives the task back to its fair order's held set (Hold).
func (j *job) hold(h *Hold) {
	a := lua.TakeHoldArgs{Queue: j.l.q, Fair: *j.l.args.Fair, ID: j.tt.ID, Key: h.Key, Cost: h.Cost, Weight: h.Weight,
		TTL: j.l.args.FairTTL, Again: h.Again}
	j.settle("hold", &j.e.stats.requeued, func(ctx context.Context) (bool, error) { return j.e.store.TakeHold(ctx, a) })
}

// A finishing write that fails is tried again, backing off from
// settleRetryMin to settleRetryMax, for up to half a lease: each write is
// guarded by the task being active, so a repeat after a lost reply writes
// nothing, and the job holds the task meanwhile, so its lease is still
// extended once Redis answers and no recovery takes it.
const (
	settleRetryMin = 50 * time.Millisecond
	settleRetryMax = time.Second
)

// settle runs a finishing write, again while it fails (until half a lease
// has passed, or the shutdown timeout), and counts it. A write that never
// lands leaves the task leased: once the lease expires, the next
// maintenance take puts it back to pending (delivered again).
func (j *job) settle(what string, c interface{ Add(int64) int64 }, write func(context.Context) (bool, error)) {
	var err error
	until := time.Now().Add(j.e.cfg.Lease / 2)
	for wait := settleRetryMin; ; wait = min(2*wait, settleRetryMax) {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		var ok bool
		ok, err = write(ctx)
		cancel()
		if err == nil {
			if ok {
				c.Add(1)
			} else {
				j.e.stats.lost.Add(1)
			}
			return
		}
		j.e.redisError()
		if time.Now().Add(wait).After(until) {
			break
		}
		if h := j.e.cfg.Hooks.FinishRetry; h != nil {
			h(j.l.d.Name)
		}
		t := time.NewTimer(wait) // backoff between tries of one write
		select {
		case <-t.C:
		case <-j.e.callCtx.Done():
			t.Stop() // the shutdown timeout passed: the lease brings the task back
			j.e.cfg.Logger.Warn("take: finishing write abandoned at shutdown", "what", what, "downstream", j.l.d.Name, "task", j.tt.ID, "err", err)
			return
		}
	}
	j.e.warnRedis("take: finishing write failed", "what", what, "downstream", j.l.d.Name, "task", j.tt.ID, "err", err)
}
