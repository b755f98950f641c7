package limiters

import (
	"fmt"
	"time"
)

// Result is one admission decision.
type Result struct {
	// Limit is the limit the decision was made against.
	Limit Limit
	// Allowed reports whether the request may proceed (and, for Allow,
	// has been charged).
	Allowed bool
	// Remaining is how many more units would be admitted right now after
	// this decision; 0 when rejected with nothing left.
	Remaining int64
	// RetryAfter is how long until the same request could be allowed.
	// It is 0 when Allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the limiter is back to its idle state
	// (window over, bucket full or empty) if nothing else arrives.
	ResetAfter time.Duration
	// Algorithm and Name identify the limiter that decided; in a Layered
	// result, the layer that rejected (or the tightest layer).
	Algorithm Algorithm
	Name      string

	// token identifies the charge for Refund: the window number or the
	// admission time.
	token int64
	// layers holds the charged layers of a Layered decision, for Refund.
	layers []layerCharge
}

func (r Result) String() string {
	if r.Allowed {
		return fmt.Sprintf("allowed by %s %q (remaining %d, reset in %s)", r.Algorithm, r.Name, r.Remaining, r.ResetAfter)
	}
	return fmt.Sprintf("rejected by %s %q (retry in %s)", r.Algorithm, r.Name, r.RetryAfter)
}
