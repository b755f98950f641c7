package limiters

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/clock"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
)

// Algorithm names an admission algorithm.
type Algorithm string

// The five admission algorithms.
const (
	FixedWindow    Algorithm = "fixed_window"
	SlidingLog     Algorithm = "sliding_log"
	SlidingCounter Algorithm = "sliding_counter"
	TokenBucket    Algorithm = "token_bucket"
	LeakyBucket    Algorithm = "leaky_bucket"
)

// Algorithms lists every algorithm, in a stable order.
func Algorithms() []Algorithm {
	return []Algorithm{FixedWindow, SlidingLog, SlidingCounter, TokenBucket, LeakyBucket}
}

// ParseAlgorithm accepts an algorithm's name.
func ParseAlgorithm(s string) (Algorithm, error) {
	for _, a := range Algorithms() {
		if string(a) == s {
			return a, nil
		}
	}
	return "", fmt.Errorf("%w: unknown algorithm %q (want one of fixed_window, sliding_log, sliding_counter, token_bucket, leaky_bucket)", ErrInvalidLimit, s)
}

func (a Algorithm) short() string {
	switch a {
	case FixedWindow:
		return "fw"
	case SlidingLog:
		return "swl"
	case SlidingCounter:
		return "swc"
	case TokenBucket:
		return "tb"
	case LeakyBucket:
		return "lb"
	}
	return ""
}

func (a Algorithm) script() lua.Admission {
	switch a {
	case FixedWindow:
		return lua.FixedWindow
	case SlidingLog:
		return lua.SlidingLog
	case SlidingCounter:
		return lua.SlidingCounter
	case LeakyBucket:
		return lua.LeakyBucket
	}
	return lua.TokenBucket
}

func (a Algorithm) windowed() bool { return a == FixedWindow || a == SlidingLog || a == SlidingCounter }

// Limiter decides whether cost units for key may pass. Implementations are
// safe for concurrent use.
//
// An error means no decision: the Result beside it is a rejection (Allowed
// false) so a caller that reads only Allowed stays closed. A failed-open
// decision is not an error: it is a Result with FailedOpen set.
type Limiter interface {
	// Allow decides and, when allowed, charges cost units to key. The
	// Result's Cancel gives the charge back (see Result.WithCancel).
	Allow(ctx context.Context, key string, cost int64) (Result, error)
	// Peek decides without charging anything; its Result has nothing to
	// cancel.
	Peek(ctx context.Context, key string, cost int64) (Result, error)
}

// Policy is what a limiter does when Redis fails.
type Policy int

const (
	// FailClosed rejects the request (the zero value): nothing passes
	// without a decision.
	FailClosed Policy = iota
	// FailOpen allows the request: Allow returns a Result with Allowed and
	// FailedOpen set (and its Cause) and a nil error, so the caller can
	// count it.
	FailOpen
)

// String is the policy's config name: "fail_open" or "fail_closed".
func (p Policy) String() string {
	if p == FailOpen {
		return "fail_open"
	}
	return "fail_closed"
}

// Config configures a Redis limiter. Name and Limit are required.
type Config struct {
	// Name identifies the limiter in key names and results, e.g. "api".
	// Letters, digits and "._-" only.
	Name string
	// Algorithm is one of the five; the zero value means TokenBucket.
	Algorithm Algorithm
	// Limit is the rate and capacity; see Limit for how each algorithm
	// reads it.
	Limit Limit
	// SubWindows, for SlidingCounter only, splits the window into that many
	// sub-windows (2 to MaxSubWindows), counted in one HASH per key: the
	// estimate's error shrinks to about Limit/SubWindows and memory grows
	// with it (docs/algorithms.md). 0 is the two-window counter.
	SubWindows int
	// Prefix is the key prefix; "" means "shaper".
	Prefix string
	// Failure is the policy when Redis fails; the zero value is FailClosed.
	Failure Policy
	// Timeout bounds each script call (0: only the context's deadline).
	// go-redis applies a context deadline to the socket only when the
	// client has ContextTimeoutEnabled; otherwise its ReadTimeout bounds
	// a call to a Redis that stopped answering.
	Timeout time.Duration
	// Observe, when set, is called after every Redis decision with the
	// script's latency and its error (nil on success). For metrics. nil
	// (the zero value) observes nothing.
	Observe func(alg Algorithm, name string, d time.Duration, err error)
	// Clock, when it is not clock.Real, is the clock every decision (and
	// refund) is made at, instead of the Redis server's TIME: a test
	// advancing a fake clock moves windows and refills without waiting.
	// It is for tests and simulations only: hosts whose clocks disagree
	// would disagree on every decision. nil (the zero value) and
	// clock.Real use the Redis clock, as production must.
	Clock clock.Clock
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// Redis is a Limiter whose state lives in Redis. Safe for concurrent use.
// The zero Redis is not usable: New builds one.
type Redis struct {
	store  *lua.Store
	cfg    Config
	space  keys.Space
	script lua.Admission
	// args holds the script's Limit, Window and SubWindows: the limit per
	// window and the window (windows), or the scaled capacity and rate
	// (buckets); a cost of c units is c*p in the script's units.
	args lua.AdmissionArgs
	p    int64
}

var _ Limiter = (*Redis)(nil)

// New validates cfg and returns a limiter that runs its script on rdb (a
// *redis.Client, *redis.ClusterClient or *redis.Ring).
func New(rdb redis.Scripter, cfg Config) (*Redis, error) {
	if cfg.Algorithm == "" {
		cfg.Algorithm = TokenBucket
	}
	if _, err := ParseAlgorithm(string(cfg.Algorithm)); err != nil {
		return nil, err
	}
	if !nameRE.MatchString(cfg.Name) {
		return nil, fmt.Errorf("%w: Name must be 1-128 of [A-Za-z0-9._-], got %q", ErrInvalidLimit, cfg.Name)
	}
	if err := cfg.Limit.Validate(); err != nil {
		return nil, err
	}
	if err := CheckSubWindows(cfg.Algorithm, cfg.Limit, cfg.SubWindows); err != nil {
		return nil, err
	}
	l := &Redis{store: lua.New(rdb), cfg: cfg, space: keys.New(cfg.Prefix), script: cfg.Algorithm.script()}
	if cfg.SubWindows > 0 {
		l.script, l.args.SubWindows = lua.SlidingSubwindows, int64(cfg.SubWindows)
	}
	if cfg.Algorithm.windowed() {
		if cfg.Limit.Burst != 0 && cfg.Limit.Burst != cfg.Limit.Rate {
			return nil, fmt.Errorf("%w: %s counts Rate per window; Burst must be 0 or equal Rate (%d), got %d", ErrInvalidLimit, cfg.Algorithm, cfg.Limit.Rate, cfg.Limit.Burst)
		}
		w := int64(cfg.Limit.Period / time.Microsecond)
		if float64(cfg.Limit.Rate)*float64(w) > maxExact {
			return nil, fmt.Errorf("%w: limit %d per window %s is too large for exact arithmetic", ErrInvalidLimit, cfg.Limit.Rate, cfg.Limit.Period)
		}
		l.args.Limit, l.args.Window, l.p = cfg.Limit.Rate, w, 1
	} else {
		n, p := cfg.Limit.scaled()
		l.args.Limit, l.args.Window, l.p = cfg.Limit.Capacity()*p, n, p
	}
	return l, nil
}

// Config returns the limiter's configuration.
func (l *Redis) Config() Config { return l.cfg }

// Key is the Redis key (or, for the window counters, the base key) that
// holds key's state.
func (l *Redis) Key(key string) string {
	if l.cfg.SubWindows > 0 {
		return l.space.SubWindows(l.cfg.SubWindows, l.cfg.Name, key)
	}
	return l.space.Limiter(l.cfg.Algorithm.short(), l.cfg.Name, key)
}

// Allow decides on cost units for key at the Redis server's time and
// charges them when allowed; the Result's Cancel refunds them.
func (l *Redis) Allow(ctx context.Context, key string, cost int64) (Result, error) {
	return l.allow(ctx, key, cost, l.now())
}

// now is the explicit time of a decision in µs, or 0 for the Redis clock.
func (l *Redis) now() int64 { return lua.NowArg(l.cfg.Clock) }

// allow is Allow at nowUS (0: the Redis clock).
func (l *Redis) allow(ctx context.Context, key string, cost int64, nowUS int64) (Result, error) {
	res, token, err := l.run(ctx, key, cost, opAllow, nowUS, 0)
	if err != nil || !res.Allowed || res.FailedOpen || cost <= 0 {
		return res, err
	}
	return res.WithCancel(func(ctx context.Context) error {
		_, _, err := l.run(ctx, key, cost, opRefund, l.now(), token)
		return err
	}), nil
}

// Peek decides without charging.
func (l *Redis) Peek(ctx context.Context, key string, cost int64) (Result, error) {
	res, _, err := l.run(ctx, key, cost, opPeek, l.now(), 0)
	return res, err
}

func (l *Redis) checkCost(cost int64) error {
	if cost < 0 {
		return fmt.Errorf("%w: cost must not be negative, got %d", ErrInvalidCost, cost)
	}
	if c := l.cfg.Limit.Capacity(); cost > c {
		return fmt.Errorf("%w: cost %d exceeds the capacity %d of %s %q, so it could never be admitted", ErrCostExceedsCapacity, cost, c, l.cfg.Algorithm, l.cfg.Name)
	}
	return nil
}

// op is what run asks the script to do.
type op int

const (
	opAllow op = iota
	opPeek
	opRefund
)

// run calls the script; token identifies the charge (the window number or
// the admission time) for a later refund.
func (l *Redis) run(ctx context.Context, key string, cost int64, o op, nowUS, token int64) (Result, int64, error) {
	res := Result{Limit: l.cfg.Limit, Algorithm: l.cfg.Algorithm, Name: l.cfg.Name}
	if err := l.checkCost(cost); err != nil {
		return res, 0, err
	}
	if l.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.cfg.Timeout)
		defer cancel()
	}
	start := time.Now()
	a := l.args
	a.Cost, a.Now = cost*l.p, nowUS
	var v lua.AdmissionReply
	var err error
	switch o {
	case opAllow:
		v, err = l.store.Admit(ctx, l.script, l.Key(key), a)
	case opPeek:
		v, err = l.store.PeekAdmission(ctx, l.script, l.Key(key), a)
	case opRefund:
		v, err = l.store.RefundAdmission(ctx, l.script, l.Key(key), a, token)
	}
	if l.cfg.Observe != nil {
		l.cfg.Observe(l.cfg.Algorithm, l.cfg.Name, time.Since(start), err)
	}
	if err != nil {
		err = fmt.Errorf("%w: %s %q: %w", ErrRedis, l.cfg.Algorithm, l.cfg.Name, err)
		if o == opRefund {
			return res, 0, err
		}
		res, err = l.fail(res, err)
		return res, 0, err
	}
	res.Allowed = v.Allowed
	res.Remaining = v.Remaining / l.p
	res.RetryAfter = time.Duration(v.RetryAfter) * time.Microsecond
	res.ResetAfter = time.Duration(v.ResetAfter) * time.Microsecond
	if res.Allowed {
		res.RetryAfter = 0
	}
	if l.cfg.Algorithm == LeakyBucket {
		// the script reports the level; remaining is the room left
		res.Remaining = (l.args.Limit - v.Remaining) / l.p
	}
	return res, v.Token, nil
}

func (l *Redis) fail(res Result, err error) (Result, error) {
	if l.cfg.Failure == FailOpen {
		res.Allowed = true
		res.FailedOpen = true
		res.Cause = fmt.Errorf("%w: %w", ErrFailedOpen, err)
		res.Remaining = l.cfg.Limit.Capacity()
		return res, nil
	}
	res.Allowed = false
	res.RetryAfter = time.Second
	return res, fmt.Errorf("%w: %w", ErrFailedClosed, err)
}

// MaxSubWindows is the most sub-windows a sliding counter may have: each
// decision reads every one of them.
const MaxSubWindows = 1000

// CheckSubWindows reports whether n sub-windows suit a limiter of algorithm
// alg and limit l: n is 0 (none), or 2 to MaxSubWindows with the sliding
// counter, each sub-window at least 1µs long and the window small enough
// for exact arithmetic. Errors wrap ErrInvalidLimit. The config file is
// checked with it too, so the YAML and Go APIs refuse the same values.
func CheckSubWindows(alg Algorithm, l Limit, n int) error {
	if n == 0 {
		return nil
	}
	if n < 2 || n > MaxSubWindows {
		return fmt.Errorf("%w: sub-windows must be 2 to %d (or 0 for the two-window counter), got %d", ErrInvalidLimit, MaxSubWindows, n)
	}
	if cmp.Or(alg, TokenBucket) != SlidingCounter {
		return fmt.Errorf("%w: %d sub-windows need algorithm %s, got %s", ErrInvalidLimit, n, SlidingCounter, cmp.Or(alg, TokenBucket))
	}
	w := int64(l.Period / time.Microsecond)
	if w < int64(n) {
		return fmt.Errorf("%w: a window of %s cannot hold %d sub-windows of at least 1µs", ErrInvalidLimit, l.Period, n)
	}
	if float64(w)*float64(n) > maxExact {
		return fmt.Errorf("%w: a window of %s with %d sub-windows is too long for exact arithmetic (window in µs × sub-windows must stay below 2^52)", ErrInvalidLimit, l.Period, n)
	}
	return nil
}
