package queue

import "strconv"

// Outcome is what became of a task given to Producer.Enqueue, so that every
// caller (the HTTP API, the enqueue CLI, cron) shares one classification
// instead of re-deriving it from the error. Enqueue sets it in
// Receipt.Outcome; the error keeps the detail.
//
// The zero value, NotEnqueued, is the outcome of a Receipt that Enqueue did
// not fill in.
type Outcome int

const (
	// NotEnqueued: the task is not in the queue, and admission did not
	// reject it: it was invalid (ErrInvalidTask, ErrUnknownDownstream,
	// limiters.ErrCostExceedsCapacity), the context ended, or Redis failed
	// (ErrEnqueue). The error says which. An admission charge made for it
	// has been refunded.
	NotEnqueued Outcome = iota
	// Accepted: enqueued to run now, or at the task's own ProcessAt. The
	// error is nil; Receipt.Admission.FailedOpen is set when the limiters
	// could not reach Redis and the policy let the task through.
	Accepted
	// Deferred: admission rejected the task for now and the policy is
	// Defer, so it was enqueued to run at its Retry-After
	// (Receipt.ProcessAt). The error is as for Accepted.
	Deferred
	// Rejected: admission refused the task and it was not enqueued. The
	// error is a *RejectedError; Receipt.Admission holds the decision and
	// its RetryAfter. Under a fail_closed policy a limiter that could not
	// reach Redis rejects too: the error then also matches
	// limiters.ErrFailedClosed, and no Retry-After is meaningful.
	Rejected
	// Duplicate: a task with the same UniqueKey exists (ErrDuplicate); this
	// one was not enqueued.
	Duplicate
	// Late: the task's predicted start (Receipt.ExpectedStart) is past its
	// deadline and its downstream refuses late tasks; the error is a
	// *LateError (ErrLate). Nothing was enqueued.
	Late
	// Collapsed: a task with the same CollapseKey still waited, and this
	// one was collapsed into it (Receipt.CollapsedInto; KeepLast gave it
	// this one's payload and headers). Nothing new was enqueued; the
	// error is nil.
	Collapsed
)

// Enqueued reports whether the task is in the queue: Accepted or Deferred.
func (o Outcome) Enqueued() bool { return o == Accepted || o == Deferred }

// String returns "not enqueued", "accepted", "deferred", "rejected",
// "duplicate", "collapsed" or "late".
func (o Outcome) String() string {
	switch o {
	case NotEnqueued:
		return "not enqueued"
	case Accepted:
		return "accepted"
	case Deferred:
		return "deferred"
	case Rejected:
		return "rejected"
	case Duplicate:
		return "duplicate"
	case Late:
		return "late"
	case Collapsed:
		return "collapsed"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}
