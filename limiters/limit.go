package limiters

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/shaper-io/shaper/internal/duration"
)

// Errors returned by this package. Each is wrapped with %w and a message
// that names the bad field and value; test with errors.Is.
var (
	// ErrInvalidLimit: a Limit or Config field is zero, negative, or too
	// large for exact arithmetic.
	ErrInvalidLimit = errors.New("limiters: invalid limit")
	// ErrInvalidCost: a cost below zero.
	ErrInvalidCost = errors.New("limiters: invalid cost")
	// ErrCostExceedsCapacity: the cost is larger than the limiter's
	// capacity, so no amount of waiting would let it through.
	ErrCostExceedsCapacity = errors.New("limiters: cost exceeds capacity")
	// ErrRedis: the Redis call failed or timed out, or its reply was not
	// the expected shape.
	ErrRedis = errors.New("limiters: redis")
	// ErrFailedOpen is never returned: a failed-open decision is a Result
	// with FailedOpen set, whose Cause wraps this (and ErrRedis).
	ErrFailedOpen = errors.New("limiters: failed open")
	// ErrFailedClosed: Redis failed and the limiter's policy is FailClosed,
	// so no decision was made and the request must not pass. The Result
	// beside it is a rejection with a RetryAfter of 1s, a hint for when to
	// try again.
	ErrFailedClosed = errors.New("limiters: failed closed")
)

// maxExact is the largest integer every step of a script's arithmetic may
// reach: Lua numbers are doubles, exact up to 2^53.
const maxExact = 1 << 52

// Limit is a rate: Rate units per Period, with a capacity of Burst units.
// The zero Limit is invalid (Validate refuses it); it stands for "no limit"
// where a field says so (shaping.Control.SetRate). Limit is a plain value,
// safe to copy and compare. PerSecond, PerMinute, PerHour and ParseLimit
// build one with Burst = Rate.
//
// Burst has one meaning: the capacity, with 0 standing for Rate (Capacity
// reports it). How each user reads the fields:
//
//   - The window algorithms: the window is Period and the limit per window
//     is Rate; Burst must be 0 or equal Rate.
//   - The buckets (TokenBucket, LeakyBucket): Rate per Period is the refill
//     or leak rate and Capacity() the bucket's size.
//   - Package shaping reads only Rate and Period and ignores Burst: a
//     shaping bucket's burst is shaping.Downstream.Burst (0 or 1: none).
type Limit struct {
	// Rate is how many units per Period; must be positive.
	Rate int64
	// Period is the window or the time Rate units take; at least 1µs.
	Period time.Duration
	// Burst is the capacity in units; 0 means Rate. Must not be negative.
	Burst int64
}

// PerSecond is rate units per second, burst rate.
func PerSecond(rate int64) Limit { return Limit{Rate: rate, Period: time.Second, Burst: rate} }

// PerMinute is rate units per minute, burst rate.
func PerMinute(rate int64) Limit { return Limit{Rate: rate, Period: time.Minute, Burst: rate} }

// PerHour is rate units per hour, burst rate.
func PerHour(rate int64) Limit { return Limit{Rate: rate, Period: time.Hour, Burst: rate} }

// WithBurst returns l with capacity burst.
func (l Limit) WithBurst(burst int64) Limit { l.Burst = burst; return l }

// Capacity is the most units the limit admits at once: Burst, or Rate when
// Burst is zero.
func (l Limit) Capacity() int64 {
	if l.Burst == 0 {
		return l.Rate
	}
	return l.Burst
}

// PerSec is the rate in units per second (for display and metrics).
func (l Limit) PerSec() float64 {
	if l.Period <= 0 {
		return 0
	}
	return float64(l.Rate) / l.Period.Seconds()
}

// IsZero reports whether l is the zero Limit.
func (l Limit) IsZero() bool { return l == Limit{} }

// RateString reads like "10/s": the rate without the burst.
func (l Limit) RateString() string {
	return fmt.Sprintf("%d/%s", l.Rate, periodString(l.Period))
}

// String reads like "10/s (burst 20)".
func (l Limit) String() string {
	return fmt.Sprintf("%d/%s (burst %d)", l.Rate, periodString(l.Period), l.Capacity())
}

func periodString(d time.Duration) string {
	switch d {
	case time.Second:
		return "s"
	case time.Minute:
		return "m"
	case time.Hour:
		return "h"
	case 24 * time.Hour:
		return "d"
	}
	// 25h, not 25h0m0s: the way a config file writes it
	s := d.String()
	if t, ok := strings.CutSuffix(s, "m0s"); ok && strings.HasSuffix(t, "h0") {
		return strings.TrimSuffix(t, "0")
	} else if ok {
		return t + "m"
	}
	return s
}

// Validate reports whether l is usable: Rate, Period and Burst positive,
// Period at least a microsecond, and amounts small enough for the scripts'
// exact integer arithmetic. Errors wrap ErrInvalidLimit and name the field.
func (l Limit) Validate() error {
	switch {
	case l.Rate <= 0:
		return fmt.Errorf("%w: Rate must be positive, got %d", ErrInvalidLimit, l.Rate)
	case l.Period < time.Microsecond:
		return fmt.Errorf("%w: Period must be at least 1µs, got %s", ErrInvalidLimit, l.Period)
	case l.Burst < 0:
		return fmt.Errorf("%w: Burst must not be negative, got %d", ErrInvalidLimit, l.Burst)
	}
	n, p := l.scaled()
	if c := l.Capacity(); float64(c)*float64(p) > maxExact || float64(c) > maxExact {
		return fmt.Errorf("%w: Burst %d over Period %s is too large for exact arithmetic (capacity × µs per unit must stay below 2^52)", ErrInvalidLimit, c, l.Period)
	}
	if float64(l.Rate)*float64(l.Period/time.Microsecond) > math.MaxInt64/2 || n <= 0 {
		return fmt.Errorf("%w: Rate %d per %s is out of range", ErrInvalidLimit, l.Rate, l.Period)
	}
	return nil
}

// scaled reduces the rate to n units per p microseconds (gcd-reduced). The
// bucket scripts count one unit as p "scaled units" and refill n scaled
// units per µs, so every amount is an exact integer.
func (l Limit) scaled() (n, p int64) {
	p = int64(l.Period / time.Microsecond)
	n = l.Rate
	if p <= 0 || n <= 0 {
		return 0, 0
	}
	g := gcd(n, p)
	return n / g, p / g
}

// Interval is how long cost units occupy at this rate, rounded up to the
// microsecond, so a bucket spaced by it is never faster than the rate. The
// product cost × period is taken in 128 bits, so no cost wraps around to a
// short interval: one too long for a Duration saturates at MaxInterval's
// ceiling (math.MaxInt64 ns, ~292 years). A cost below 1 occupies nothing.
func (l Limit) Interval(cost int64) time.Duration {
	us, ok := l.IntervalMicros(cost)
	if !ok {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(us) * time.Microsecond
}

// IntervalMicros is Interval in whole microseconds; ok is false when the
// interval does not fit a time.Duration (the cost is far too large for the
// rate) or the limit is invalid.
func (l Limit) IntervalMicros(cost int64) (us int64, ok bool) {
	n, p := l.scaled()
	if n == 0 {
		return 0, false
	}
	if cost <= 0 {
		return 0, true
	}
	hi, lo := bits.Mul64(uint64(cost), uint64(p))
	// ceil((hi:lo) / n): add n-1 with carry, then divide; a quotient that
	// does not fit 64 bits (hi >= n) is out of range.
	lo, carry := bits.Add64(lo, uint64(n-1), 0)
	hi += carry
	if hi >= uint64(n) {
		return 0, false
	}
	q, _ := bits.Div64(hi, lo, uint64(n))
	if q > math.MaxInt64/uint64(time.Microsecond) {
		return 0, false
	}
	return int64(q), true
}

// UnitsIn is how many whole units the rate lets through in d (rounded
// down), computed in 128 bits and saturating at math.MaxInt64.
func (l Limit) UnitsIn(d time.Duration) int64 {
	n, p := l.scaled()
	us := int64(d / time.Microsecond)
	if n == 0 || us <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(us), uint64(n))
	if hi >= uint64(p) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(p))
	return int64(min(q, math.MaxInt64))
}

// Scaled returns the limit reduced to n units per p microseconds, in lowest
// terms: the fixed-point units the bucket scripts use.
func (l Limit) Scaled() (n, p int64) { return l.scaled() }

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// ParseLimit reads a rate such as "50/s", "3000/m", "2.5/s", "10/1500ms",
// "100/h" or "1/1d", or a bare number per second ("20" is 20/s). The
// period is s, m, h or d (also sec, second, min, minute, hour, day) or a
// duration: Go's ("500ms") or with days first ("1d", "1d12h"; a day is
// 24h). The burst defaults to the rate. Decimal rates become integer
// rates over a longer period ("2.5/s" is 5 per 2s). Every rate shaper
// reads is read here — config file, CLI arguments and flags, HTTP control
// endpoint — so each accepts the same forms. Every error wraps
// ErrInvalidLimit and, after its prefix, reads `invalid rate "…": why` (or
// `invalid rate "…" (want …)` when it is neither a number nor has a
// slash), the same words wherever a rate is read.
func ParseLimit(s string) (Limit, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: invalid rate %q: %s", ErrInvalidLimit, s, fmt.Sprintf(format, args...))
	}
	num, per, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		if num == "" || strings.Trim(num, "0123456789.eE+-") != "" {
			return Limit{}, fmt.Errorf("%w: invalid rate %q (want <number>/<unit>, e.g. 50/s)", ErrInvalidLimit, s)
		}
		if f, err := strconv.ParseFloat(num, 64); err == nil && f <= 0 {
			return Limit{}, bad("a rate must be positive, got %q", num)
		}
		per = "s" // a bare number is per second
	}
	num, per = strings.TrimSpace(num), strings.TrimSpace(per)
	var period time.Duration
	switch per {
	case "s", "sec", "second":
		period = time.Second
	case "m", "min", "minute":
		period = time.Minute
	case "h", "hour":
		period = time.Hour
	case "d", "day":
		period = 24 * time.Hour
	default:
		d, err := duration.Parse(per)
		if err != nil || d <= 0 {
			return Limit{}, bad("unknown period %q (use s, m, h, d or a duration like 500ms)", per)
		}
		if d < time.Microsecond {
			return Limit{}, bad("the period must be at least 1µs, got %s", d)
		}
		period = d
	}
	if strings.ContainsAny(num, "eE") && strings.Trim(num, "0123456789.eE+-") == "" {
		return Limit{}, bad("exponents are not supported (write the count out, e.g. 1000/s)")
	}
	scale := int64(1)
	whole, frac, hasFrac := strings.Cut(num, ".")
	if len(frac) > 6 {
		return Limit{}, bad("at most 6 decimals")
	}
	for range frac {
		scale *= 10
	}
	rate, err := strconv.ParseInt(whole+frac, 10, 64)
	if err != nil || (hasFrac && frac == "") || rate <= 0 {
		return Limit{}, bad("the count must be a positive number, got %q", num)
	}
	if scale > 1 {
		g := gcd(rate, scale)
		rate, scale = rate/g, scale/g
		if float64(period)*float64(scale) > math.MaxInt64 {
			return Limit{}, bad("too slow (the period would pass 292 years)")
		}
		period *= time.Duration(scale)
	}
	l := Limit{Rate: rate, Period: period, Burst: rate}
	if l.Validate() != nil {
		// Validate's words name Go fields; a rate's reader wrote a string.
		return Limit{}, bad("out of range (the count times the period in µs must stay below 2^52)")
	}
	return l, nil
}
