// Package limiters is shaper's admission control: five rate-limiting
// algorithms run as Redis Lua scripts behind one Limiter interface.
//
//   - FixedWindow: a counter per aligned window. O(1) memory; lets up to 2×
//     the limit through across a window edge.
//   - SlidingLog: a ZSET of admission times. Exact; O(limit) memory per key.
//   - SlidingCounter: the current and previous window's counters, the
//     previous one weighted by how much of it still overlaps. O(1), close to
//     exact. With Config.SubWindows = N, N sub-windows in one HASH instead:
//     O(N) memory, the estimate's error about 1/N of the two-window one's.
//   - TokenBucket: refills Rate per Period up to Burst; allows bursts.
//   - LeakyBucket: policing mode; a level that drains at Rate, full ⇒ reject.
//
// A decision is one script call (atomic, one round trip) that reads the
// Redis clock, so every host agrees. Every call returns a Result with
// Allowed, Remaining, RetryAfter and ResetAfter; Result.Cancel gives an
// allowed charge back (like rate.Reservation.Cancel), and a Limiter of
// your own makes its Results cancellable with Result.WithCancel. Layered
// composes limiters (all must allow; a rejection cancels the layers
// already charged); Config.Failure picks fail-open (a Result with
// FailedOpen set, no error) or fail-closed (ErrFailedClosed: no decision)
// when Redis errors; Prefilter rejects keys known to be over their limit
// without a round trip. All types are safe for concurrent use.
//
// The queueing form of the leaky bucket (shaping) lives in package shaping.
package limiters
