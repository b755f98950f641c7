package shaping

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
)

// Action is what the dispatcher does with a task once its handler has
// returned.
type Action int

const (
	// Complete: the task is done and removed from its queue.
	Complete Action = iota
	// Throttle: the downstream asked to slow down. The bucket is pushed
	// back by Decision.Pause (every process waits it out) and the task
	// waits for a new slot in place: no attempt is consumed, nothing is
	// archived.
	Throttle
	// Retry: the task goes back to its queue with asynq's backoff; the
	// attempt counts against its retry budget.
	Retry
	// Archive: the task is archived with its error and never retried.
	Archive
)

// String is the action's name: "complete", "throttle", "retry", "archive".
func (a Action) String() string {
	switch a {
	case Complete:
		return "complete"
	case Throttle:
		return "throttle"
	case Retry:
		return "retry"
	case Archive:
		return "archive"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Decision is the classification of one handler result: a value, so a
// test can check what the dispatcher would do without running one (see
// package shapingtest).
type Decision struct {
	// Action is what the dispatcher does with the task (the zero value is
	// Complete).
	Action Action
	// Pause is how long a Throttle pushes the bucket back; 0 with an
	// adaptive rate and no Retry-After (the rate slows down instead).
	Pause time.Duration
	// Unsaid is true when the throttle's answer gave no wait (a bare 429):
	// Pause is the default, and the dispatcher backs off further on each
	// bare refusal in a row.
	Unsaid bool
	// Adapt is the event reported to the adaptive rate: "inc", "dec" or
	// "" (none). Only used when the downstream has an adaptive rate.
	Adapt string
	// Outcome is the metric label (shaper_shaping_outcomes_total).
	Outcome string
	// Err is the error the task is retried or archived with; nil for
	// Complete and Throttle.
	Err error
	// Outage is true when the result says the downstream is down: a 5xx
	// (StatusError), a timeout or a connection failure, never a throttle
	// (429/503 Retry-After), a 4xx or a panic. A downstream's circuit
	// breaker counts it as an error and, once it opens, holds the task in
	// place (no attempt consumed) instead of Action; without a breaker it
	// changes nothing.
	Outage bool
}

// Budget is a task's retry state: Retried failed attempts so far, of at
// most MaxRetry (negative: no limit).
type Budget struct {
	// Retried is how many attempts have failed so far (0: a first attempt).
	Retried int
	// MaxRetry is the most failed attempts allowed; negative is no limit.
	MaxRetry int
}

func (b Budget) exhausted() bool { return b.MaxRetry >= 0 && b.Retried >= b.MaxRetry }

// Classify says what the dispatcher does after a handler returned err,
// for a task with budget b on a downstream with (adaptive) or without an
// adaptive rate. It is pure: no Redis, no clock. The rules, in order:
// nil completes; a *ThrottledError throttles (its After, or 1s when zero
// and the rate is not adaptive); a handler panic, ErrPermanent or
// asynq.SkipRetry archive; a timeout on an adaptive downstream retries and
// slows the rate; an exhausted budget archives; anything else retries.
// Retries and exhausted archives are marked Outage when err is a 5xx, a
// timeout or a connection failure.
func Classify(err error, b Budget, adaptive bool) Decision {
	var th *ThrottledError
	switch {
	case err == nil:
		return Decision{Action: Complete, Adapt: "inc", Outcome: "success"}
	case errors.As(err, &th):
		pause, unsaid := th.After, th.After <= 0
		if unsaid && !adaptive {
			pause = time.Second
		}
		return Decision{Action: Throttle, Pause: pause, Unsaid: unsaid, Adapt: "dec", Outcome: "throttled"}
	case errors.Is(err, errPanic):
		return Decision{Action: Archive, Outcome: "panic", Err: fmt.Errorf("%w: %w", err, asynq.SkipRetry)}
	case errors.Is(err, ErrPermanent), errors.Is(err, asynq.SkipRetry):
		return Decision{Action: Archive, Outcome: "archived", Err: fmt.Errorf("%w: %w", err, asynq.SkipRetry)}
	case isTimeout(err) && adaptive && !b.exhausted():
		return Decision{Action: Retry, Adapt: "dec", Outcome: "retry", Err: err, Outage: true}
	case b.exhausted():
		return Decision{Action: Archive, Outcome: "archived", Err: fmt.Errorf("%w (after %d retries): %w", err, b.Retried, asynq.SkipRetry),
			Outage: isOutage(err)}
	}
	return Decision{Action: Retry, Outcome: "retry", Err: err, Outage: isOutage(err)}
}

// isOutage reports a handler error that says the downstream is down
// rather than that this task is wrong: a StatusError of 500 or more, a
// timeout, or a failure to connect or to read the answer. It is the
// circuit breaker's notion of an error.
func isOutage(err error) bool {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Code >= 500
	}
	if isTimeout(err) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var op *net.OpError
	var ue *url.Error
	return errors.As(err, &op) || errors.As(err, &ue) && errors.Is(ue.Err, io.EOF)
}

var errPanic = errors.New("handler panic")

// Call runs h on t as the dispatcher does: a panic becomes an error
// (which Classify archives) instead of crashing the process.
func Call(ctx context.Context, h HandlerFunc, t *Task) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", errPanic, p)
		}
	}()
	return h(ctx, t)
}
