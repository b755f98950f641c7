package take

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/shaper-io/shaper/internal/asynqmsg"
)

// ErrRequeue, returned by a Handler (or wrapped), gives the task back to
// the head of its pending list with no attempt consumed: the handler did
// not call the downstream (it is stopping, or the task must wait again).
var ErrRequeue = errors.New("take: give the task back")

// Hold, returned by a Handler (or wrapped), gives a task of a fair
// downstream whose call never started back to fair order instead of the
// head of pending, no attempt consumed: to the held set when its
// admission key was paused (the key's tasks wait there until it
// resumes), or with Again first in line (its slot was wasted). Key, Cost
// and Weight are the task's admission key, its cost and the key's
// weight. On a downstream without fair order it is ErrRequeue.
type Hold struct {
	Key    string
	Cost   int64
	Weight float64
	// Again: the task's slot was wasted (its key is not paused), and it
	// goes back to fair order first in line, for the next take to
	// reserve its next slot.
	Again bool
}

func (h *Hold) Error() string {
	if h.Again {
		return "take: give the task of key " + strconv.Quote(h.Key) + " back to fair order"
	}
	return "take: hold the task of paused key " + strconv.Quote(h.Key)
}

// Handler calls the downstream for one task. nil finishes the task as
// done; an error retries it with backoff, or archives it once its retries
// are spent or when the error wraps asynq.SkipRetry; asynq.RevokeTask
// removes it. ctx ends at the task's
// Timeout or Deadline (asynq's rule; 30 minutes when it has neither) and
// when the engine's shutdown timeout passes.
type Handler func(ctx context.Context, t *Task) error

// Task is a task taken with its slot. The handler owns it for the call.
type Task struct {
	// ID, Type, Queue, Payload and Headers are the asynq task's.
	ID      string
	Type    string
	Queue   string
	Payload []byte
	Headers map[string]string
	// Retried is how many attempts failed before this one; MaxRetry is the
	// task's asynq MaxRetry.
	Retried, MaxRetry int
	// Slot is the start of the slot reserved for this call, on the local
	// clock; the handler is called at or just after it.
	Slot time.Time
	// Priority is the task's priority (internal/priority), 3 on a
	// downstream without Priority.
	Priority int
	// Order numbers the engine's takes, in the order they left the queue
	// (increasing within a process): handlers that queue tasks of their
	// own keep first-in first-out by it, whatever order their goroutines
	// ran in.
	Order int64
	// Behind is how many tasks of the same take follow this one. Their
	// handlers are called right after it, in take order, so a handler
	// side that reserves for a run of tasks can reserve for them too.
	Behind int
	// Backlog: another task of its admission key still waited in fair
	// order when it was taken (the fair share's Jain index counts only
	// keys with a backlog); false off fair order.
	Backlog bool
	// Reservation is the slot the take reserved for this task on the
	// downstream's bucket (Downstream.Reserve), nil when it reserved none.
	Reservation *Reservation

	msg *asynqmsg.Message
}

// Reservation is a task's slot as the take reserved it, on the Redis
// clock: one unit of cost.
type Reservation struct {
	// Slot and Now are µs since the epoch: the slot's start and the take's
	// now.
	Slot, Now int64
	// Issued is the bucket's count of units issued up to and including
	// this task's (an answer compares it with what the downstream saw).
	Issued int64
	// Units is the units of cost the slot holds (the task's cost).
	Units int64
	// Lease, under a concurrency cap decided at the take
	// (Downstream.Leases), is the task's lease among the calls in flight
	// (concurrency.lua's member): the handler renews and releases it.
	Lease string
}

func newTask(m *asynqmsg.Message, slot time.Time, order int64, prio, behind int) *Task {
	return &Task{ID: m.ID, Type: m.Type, Queue: m.Queue, Payload: m.Payload, Headers: m.Headers,
		Retried: m.Retried, MaxRetry: m.Retry, Slot: slot, Priority: prio, Order: order, Behind: behind, msg: m}
}

// defaultTimeout is asynq's timeout for a task with neither Timeout nor
// Deadline (asynq v0.26 processor.go).
const defaultTimeout = 30 * time.Minute

// deadline is when a call of m started at now must end, as asynq's
// processor.computeDeadline: the earlier of now+Timeout and Deadline.
func deadline(m *asynqmsg.Message, now time.Time) time.Time {
	switch {
	case m.Timeout == 0 && m.Deadline == 0:
		return now.Add(defaultTimeout)
	case m.Timeout == 0:
		return time.Unix(m.Deadline, 0)
	case m.Deadline == 0:
		return now.Add(time.Duration(m.Timeout) * time.Second)
	}
	return time.Unix(min(now.Unix()+m.Timeout, m.Deadline), 0)
}

type inLineKey struct{}

// InLine tells the engine that the task whose handler got ctx has its
// place in line, so the handler of the next task of its take may be
// called (Downstream.InLine). Calling it again, or for a downstream
// without InLine, does nothing.
func InLine(ctx context.Context) {
	if f, ok := ctx.Value(inLineKey{}).(func()); ok {
		f()
	}
}
