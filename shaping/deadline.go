package shaping

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/shaper-io/shaper/shaping/take"
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

// taken is where a task stands in the engine's takes, carried to its
// release: order queues it in the lane should it wait there
// (take.Task.Order, with the priority in its high bits), backlog is
// take.Task.Backlog, slot the slot the take reserved for it, if any
// (takeslot.go), and lease its place among the calls in flight, if the
// take gave it one.
type taken struct {
	order   int64
	backlog bool // take.Task.Backlog
	slot    *takeSlot
	lease   *leaseTurn
}

// leaseTurn is a granted lease (member, for release) and the waiter's
// turn at the slot lane: the waiters granted leases queue for their slots
// in the order they were granted, so that two granted at once do not race
// to the lane (a stocked slot goes to whoever comes first). prev closes
// once the waiter granted before it has its place in the slot lane or
// left; close placed (once) when this one has.
type leaseTurn struct {
	member string
	prev   <-chan struct{}
	placed chan struct{}
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

// takeSlot is the slot a task's take reserved, until the task uses it.
type takeSlot struct {
	res  *take.Reservation
	used bool
}
