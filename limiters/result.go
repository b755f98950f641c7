package limiters

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Result is one admission decision. The zero Result is a rejection by no
// limiter, with nothing to cancel.
//
// A Result is a value, safe to copy; its copies share one Cancel, so a
// charge is given back at most once however many copies ask.
type Result struct {
	// Limit is the limit the decision was made against; the zero Limit
	// when no limiter decided (a zero Result).
	Limit Limit
	// Allowed reports whether the request may proceed (and, for Allow,
	// has been charged). False is the zero value: rejected.
	Allowed bool
	// FailedOpen reports that Redis failed and the limiter's policy is
	// FailOpen: the request was let through without a decision and
	// nothing was charged. Allowed is then true (in a Layered result, it
	// says that at least one layer failed open, and Allowed is false only
	// when another layer rejected). Cause says why. False (the zero value)
	// means a real decision.
	FailedOpen bool
	// Cause is the error a FailedOpen decision stands in for (it wraps
	// ErrFailedOpen and ErrRedis); nil unless FailedOpen.
	Cause error
	// Remaining is how many more units would be admitted right now after
	// this decision; 0 when rejected with nothing left. A failed-open
	// decision reports the full capacity.
	Remaining int64
	// RetryAfter is how long until the same request could be allowed.
	// It is 0 when Allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the limiter is back to its idle state
	// (window over, bucket full or empty) if nothing else arrives; 0 when
	// it already is, or when no decision was made.
	ResetAfter time.Duration
	// Algorithm identifies the limiter that decided; in a Layered result,
	// the layer that rejected (or the tightest layer). Empty ("") for a
	// Result no Redis limiter made.
	Algorithm Algorithm
	// Name is that limiter's Config.Name; "" as for Algorithm.
	Name string
	// Shadow holds, in a Layered result, the decisions of the layers in
	// Shadow mode, in layer order; none of them was applied. nil when no
	// layer is in shadow (or none was asked: an enforced layer before
	// them rejected).
	Shadow []ShadowDecision

	// undo gives back the charge; nil when there is nothing to give back.
	undo *undo
}

// undo runs a Result's cancel once: after a cancel succeeds, later calls
// (from any copy of the Result) do nothing. A failed cancel may be retried.
type undo struct {
	mu   sync.Mutex
	f    func(ctx context.Context) error
	done bool
}

// Cancel gives back what the Allow that returned r charged, for a request
// that was admitted but then not carried out (its enqueue failed), like
// rate.Reservation.Cancel. It does nothing, and returns nil, for a
// rejection, a Peek, a failed-open decision (nothing was charged), a zero
// Result, and a Result already cancelled. Unlike Allow it cannot fail
// open: when Redis fails it returns the error (wrapping ErrRedis), and the
// Cancel may be tried again.
func (r Result) Cancel(ctx context.Context) error {
	u := r.undo
	if u == nil {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done {
		return nil
	}
	if err := u.f(ctx); err != nil {
		return err
	}
	u.done = true
	return nil
}

// WithCancel returns r with cancel as what its Cancel runs (at most once
// successfully, for r and every copy of the returned Result). It is how a
// Limiter outside this package makes its decisions cancellable: a limiter
// attaches its own undo to an allowed Result, a wrapper passes its inner
// Result's Cancel on or wraps it. A nil cancel makes Cancel do nothing.
func (r Result) WithCancel(cancel func(ctx context.Context) error) Result {
	r.undo = nil
	if cancel != nil {
		r.undo = &undo{f: cancel}
	}
	return r
}

// String reads like `allowed by token_bucket "api" (remaining 3, reset in
// 1s)` or `rejected by token_bucket "api" (retry in 500ms)`.
func (r Result) String() string {
	switch {
	case r.FailedOpen && r.Allowed:
		return fmt.Sprintf("allowed by %s %q without a decision (failed open)", r.Algorithm, r.Name)
	case r.Allowed:
		return fmt.Sprintf("allowed by %s %q (remaining %d, reset in %s)", r.Algorithm, r.Name, r.Remaining, r.ResetAfter)
	}
	return fmt.Sprintf("rejected by %s %q (retry in %s)", r.Algorithm, r.Name, r.RetryAfter)
}
