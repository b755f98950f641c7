package shaping

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/shaper-io/shaper/internal/envelope"
	"github.com/shaper-io/shaper/limiters"
)

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
		// for a lease holds no attempt and no slot
		lease, err := r.leases.acquire(ctx, t.Key)
		if err != nil {
			return r.giveBack(ctx)
		}
		defer r.leases.release(lease)
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
		if r.skipLate(res) {
			front = true
			continue
		}
		if r.beforePushback(t.Slot) {
			// reserved before a pushback: the downstream asked to wait
			// past it, so the slot is given up, its quota units at once
			// (the next reservation must find them back, or it waits
			// for the quota's window)
			if len(r.ds.Quotas) > 0 {
				r.unquota(t.Cost, grant{slot: t.Slot, issued: t.seq})
			}
			front = true
			continue
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
			r.bare.Store(0)
			return d.Err // nil completes; SkipRetry archives; others retry
		}
		if d.Unsaid && d.Pause > 0 {
			d.Pause = r.bareBackoff(d.Pause)
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
	r.roomMade()
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
		// after the call: it takes the lane's lock, which must not
		// stand between the late check and the release
		r.fstats.release(t.Key, r.lane.backlogged(t.Key), now)
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
	r.pushed(until)
}

// maxBareBackoff bounds the backoff of bare refusals in a row.
const maxBareBackoff = time.Minute

// bareBackoff is the pause after a refusal that gave no wait: base, then
// doubled for each bare refusal in a row (up to maxBareBackoff), so a
// downstream that answers a bare 429 forever gets ever fewer calls.
func (r *runner) bareBackoff(base time.Duration) time.Duration {
	n := min(r.bare.Add(1)-1, 16)
	return min(base<<n, max(maxBareBackoff, base))
}

// pushed records that next_free was pushed to nf (Redis clock): slots
// this process reserved before it start before nf.
func (r *runner) pushed(nf time.Time) {
	us := nf.UnixMicro()
	for {
		cur := r.pushUntil.Load()
		if us <= cur || r.pushUntil.CompareAndSwap(cur, us) {
			return
		}
	}
}

// beforePushback reports whether a slot (Redis clock) was reserved
// before a pushback of this process that reaches past it.
func (r *runner) beforePushback(slot time.Time) bool {
	return slot.UnixMicro() < r.pushUntil.Load()
}

// hold counts the tasks this process holds for the downstream.
func (r *runner) hold(delta int64) {
	n := r.held.Add(delta)
	if m := r.d.m; m != nil {
		m.Held.WithLabelValues(r.ds.Name).Set(float64(n))
	}
	if delta < 0 {
		r.roomMade()
	}
}
