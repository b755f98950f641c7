package shaping

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
)

// ErrDeadlinePassed: a task's deadline (envelope.HeaderDeadline, set from
// queue.Task.Deadline or TTL) came before it could start. The task is
// archived unsent with this error ("deadline passed"), never retried, and
// counted in shaper_shaping_deadline_passed_total.
var ErrDeadlinePassed = errors.New("shaping: deadline passed")

type deadlineKey struct{}

// withDeadline carries a task's deadline to the lane, which skips the
// task rather than give it a slot that starts after it.
func withDeadline(ctx context.Context, d time.Time) context.Context {
	if d.IsZero() {
		return ctx
	}
	return context.WithValue(ctx, deadlineKey{}, d)
}

type takenKey struct{}

// taken is where a task stands in the engine's takes, carried to the
// lane: order queues FIFO waiters (take.Task.Order, with the priority in
// its high bits), behind says how many tasks of the same take come right
// after it (take.Task.Behind), so the lane reserves their slots in the
// same call.
type taken struct {
	order  int64
	behind int
}

func withTaken(ctx context.Context, t taken) context.Context {
	return context.WithValue(ctx, takenKey{}, t)
}

// takenOf is what withTaken put in ctx; the zero taken when none.
func takenOf(ctx context.Context) taken {
	t, _ := ctx.Value(takenKey{}).(taken)
	return t
}

// deadlineOf is the deadline withDeadline put in ctx; zero when none.
func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Value(deadlineKey{}).(time.Time)
	return d
}

// pastDeadline reports whether a task with deadline d (zero: none) may no
// longer start at local time at.
func pastDeadline(d, at time.Time) bool { return !d.IsZero() && at.After(d) }

// late is the error that archives a task with deadline d at now: its
// deadline has passed, or its earliest slot lies past it.
func late(d, now time.Time) error {
	return fmt.Errorf("%w (deadline %s, now %s): %w", ErrDeadlinePassed, d.UTC().Format(time.RFC3339Nano),
		now.UTC().Format(time.RFC3339Nano), asynq.SkipRetry)
}

// expire archives t when its deadline has passed (nil when it has not):
// checked when the task is taken, and again just before its handler runs.
func (r *runner) expire(t *Task) error {
	if !pastDeadline(t.Deadline, r.d.cfg.Clock.Now()) {
		return nil
	}
	return r.lateArchive(t)
}

// lateArchive counts t as late and returns the error that archives it.
func (r *runner) lateArchive(t *Task) error {
	r.outcome("deadline_passed")
	if m := r.d.m; m != nil {
		m.DeadlinePassed.WithLabelValues(r.ds.Name).Inc()
	}
	return late(t.Deadline, r.d.cfg.Clock.Now())
}

// dropExpired refuses, with ErrDeadlinePassed, every waiter whose deadline
// has passed (l.mu held), so the lane never reserves a slot for it.
func (l *lane) dropExpired() {
	now := l.r.d.cfg.Clock.Now()
	for e := l.q.Front(); e != nil; {
		next := e.Next()
		if w := e.Value.(*waiter); pastDeadline(w.deadline, now) {
			l.remove(e).done <- grant{err: ErrDeadlinePassed}
		}
		e = next
	}
}

// tooLate reports whether w cannot use a slot starting at slot on the
// Redis clock: it would start after w's deadline.
func (l *lane) tooLate(w *waiter, slot time.Time) bool {
	return pastDeadline(w.deadline, slot.Add(l.r.offset.get()))
}

// frontFor is the first waiter that can use a slot starting at slot (l.mu
// held): waiters before it that would start after their deadline are
// refused, and the slot goes to the next one.
func (l *lane) frontFor(slot time.Time) *list.Element {
	e := l.q.Front()
	for e != nil && l.tooLate(e.Value.(*waiter), slot) {
		l.remove(e).done <- grant{err: ErrDeadlinePassed}
		e = l.q.Front()
	}
	return e
}

// pastDeadlineNow reports whether w's deadline has passed (l.mu held).
func (l *lane) pastDeadlineNow(w *waiter) bool {
	return pastDeadline(w.deadline, l.r.d.cfg.Clock.Now())
}

// unstock puts a stocked slot back in front, for the next waiter: the one
// that took it cannot start by its deadline, and every other slot the lane
// could get it starts later still (l.mu held).
func (l *lane) unstock(g grant) {
	l.stock = append([]grant{g}, l.stock...)
}
