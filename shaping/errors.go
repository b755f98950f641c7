package shaping

import (
	"errors"
	"fmt"
	"time"

	"github.com/shaper-io/shaper/internal/control"
	"github.com/shaper-io/shaper/shaping/take"
)

// ThrottledError is returned by a handler when the downstream said "slow
// down, retry after After" (HTTP 429/503 with Retry-After). The dispatcher
// pushes the downstream's bucket forward by After, so every worker in every
// process backs off at once, and retries the task at its next slot without
// consuming a retry attempt. After 0 means the downstream gave no
// Retry-After: the dispatcher pauses 1s, or, with an adaptive rate, only
// slows the rate down.
type ThrottledError struct {
	// After is the downstream's Retry-After; 0 when it gave none.
	After time.Duration
	// Err is the downstream's answer, for messages; may be nil.
	Err error
}

// Error reads "shaping: downstream throttled, retry after <After>[: <Err>]".
func (e *ThrottledError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("shaping: downstream throttled, retry after %s", e.After)
	}
	return fmt.Sprintf("shaping: downstream throttled, retry after %s: %v", e.After, e.Err)
}

// Unwrap returns Err.
func (e *ThrottledError) Unwrap() error { return e.Err }

// Throttled wraps err as a ThrottledError asking to retry after d.
func Throttled(d time.Duration, err error) error { return &ThrottledError{After: d, Err: err} }

// StatusError is a downstream's answer carrying a status code, as an
// error: the http handler returns one for a 5xx other than 503, and a Go
// handler may return one for its own protocol's equivalent. A Code of 500
// or more says the downstream is down: it is retried like any error, and a
// circuit breaker counts it (see Breaker).
type StatusError struct {
	// Code is the HTTP status code, or the equivalent.
	Code int
	// Err describes the answer; may be nil.
	Err error
}

// Error reads as Err, or "status <Code>" without one.
func (e *StatusError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("status %d", e.Code)
	}
	return e.Err.Error()
}

// Unwrap returns Err.
func (e *StatusError) Unwrap() error { return e.Err }

// ErrPermanent marks a handler error that retrying cannot fix (a 4xx, a bad
// payload): the task is archived at once with the error.
var ErrPermanent = errors.New("permanent failure")

// Permanent wraps err so the task is archived without retries.
func Permanent(err error) error { return fmt.Errorf("%w: %w", ErrPermanent, err) }

// ErrUnknownDownstream: a name that was never added.
var ErrUnknownDownstream = control.ErrUnknownDownstream

// ErrCancelled is the cause of a handler's context (context.Cause) when its
// task was cancelled while taken (asynq's Inspector.CancelProcessing, or
// DELETE on an active task): the handler should stop; the task is removed,
// not retried, unless the handler still returns nil.
var ErrCancelled = take.ErrCancelled

// errGiveBack: serve ends without a call, and the task goes back to the
// head of its queue with no attempt consumed.
var errGiveBack = errors.New("shaping: task given back")

var errStopping = errors.New("shaping: stopping")
