package lua

import (
	"context"
	"fmt"
)

// BreakerArgs are breaker.lua's thresholds (ARGV[2..9]). KEYS[1] is the
// breaker's HASH.
type BreakerArgs struct {
	// Now is ARGV[2]: µs since the epoch; 0 reads Redis TIME.
	Now int64
	// Window is ARGV[3]: the sliding window in µs (10 buckets of a tenth).
	Window int64
	// MinCalls is ARGV[4]: the fewest calls in the window for it to open.
	MinCalls int64
	// RatioPPM is ARGV[5]: the error ratio that opens it, per million.
	RatioPPM int64
	// Cooldown and MaxCooldown are ARGV[6] and ARGV[7], in µs: the first
	// opening's cool-down, and the cap of its doubling.
	Cooldown, MaxCooldown int64
	// ProbeInterval is ARGV[8]: µs between half-open probes.
	ProbeInterval int64
	// Probes is ARGV[9]: probes that must succeed to close it.
	Probes int64
}

// BreakerReport is a batch of call outcomes (ARGV[10..13]).
type BreakerReport struct {
	// Probe is true for outcomes of half-open probes granted in the
	// half-open state that began at Since; false for outcomes of releases
	// made while closed.
	Probe bool
	Since int64
	// Calls is how many calls ended; Errors how many of them failed the
	// way an outage does.
	Calls, Errors int64
}

// The breaker's states, as breaker.lua stores and returns them.
const (
	BreakerClosed   = 0
	BreakerOpen     = 1
	BreakerHalfOpen = 2
)

// BreakerReply is breaker.lua's reply.
type BreakerReply struct {
	// State is BreakerClosed, BreakerOpen or BreakerHalfOpen, after the call.
	State int64
	// Since is when the state began and Until when an open state's
	// cool-down ends, µs since the epoch (0: never / none).
	Since, Until int64
	// Moved is true when this call made the transition to State.
	Moved bool
	// Granted (ProbeBreaker) is true when a release may go now: the
	// breaker is closed, or this is a probe's turn.
	Granted bool
	// Wait (ProbeBreaker) is the µs until the next chance when not granted.
	Wait int64
	// Now is the script's now (µs).
	Now int64
}

// ReportBreaker counts a batch of outcomes; the breaker opens, reopens or
// closes when they say so.
func (s *Store) ReportBreaker(ctx context.Context, key string, a BreakerArgs, r BreakerReport) (BreakerReply, error) {
	kind := "closed"
	if r.Probe {
		kind = "probe"
	}
	return s.breaker(ctx, key, "report", a, kind, r.Since, r.Calls, r.Errors)
}

// ProbeBreaker asks whether a release may go now: it turns an open breaker
// whose cool-down is over half-open, and grants half-open probes at the
// probe pace across every caller.
func (s *Store) ProbeBreaker(ctx context.Context, key string, a BreakerArgs) (BreakerReply, error) {
	return s.breaker(ctx, key, "probe", a, "", 0, 0, 0)
}

func (s *Store) breaker(ctx context.Context, key, op string, a BreakerArgs, kind string, since, calls, errs int64) (BreakerReply, error) {
	v, err := s.ints(ctx, breaker, []string{key}, 7, op, a.Now, a.Window, a.MinCalls, a.RatioPPM, a.Cooldown,
		a.MaxCooldown, a.ProbeInterval, a.Probes, kind, since, calls, errs)
	if err != nil {
		return BreakerReply{}, err
	}
	if v[0] < BreakerClosed || v[0] > BreakerHalfOpen {
		return BreakerReply{}, fmt.Errorf("breaker: state %d in reply", v[0])
	}
	return BreakerReply{State: v[0], Since: v[1], Until: v[2], Moved: v[3] == 1, Granted: v[4] == 1, Wait: v[5], Now: v[6]}, nil
}
