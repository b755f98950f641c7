// Package bucket calls the shaping script (shaping.lua) on a downstream's
// bucket: the one next_free timestamp in Redis that every release of the
// downstream reserves its slot from. It holds the rules of a call: a
// cost of at least 1, a valid rate, a slot's interval and the burst
// allowance within sizing.MaxInterval; and it runs the script with a
// timeout, reporting each call's latency. The dispatcher (package
// shaping, whose Buckets add quotas and answers) reserves, pushes back and
// resets through it; the producer (package queue) peeks, to predict when
// a task starts.
package bucket

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/sizing"
	"github.com/shaper-io/shaper/limiters"
)

// ErrBucket: the shaping script failed or timed out (shaping.ErrBucket).
var ErrBucket = errors.New("shaping: bucket")

// MaxIntervalUS is sizing.MaxInterval in µs: the furthest one call may
// move next_free.
const MaxIntervalUS = int64(sizing.MaxInterval / time.Microsecond)

// DefaultTimeout bounds each script call unless New is given another.
const DefaultTimeout = 2 * time.Second

// Op is what Run asks the script to do.
type Op int

const (
	// Reserve reserves slots (lua.Store.Reserve).
	Reserve Op = iota
	// Peek reports the wait a reservation would get, writing nothing.
	Peek
	// PushBack moves next_free to at least now + the interval.
	PushBack
	// Reset deletes next_free.
	Reset
)

// Client runs the shaping script for any number of buckets under one key
// prefix. Safe for concurrent use.
// The zero Client is not usable: New builds one.
type Client struct {
	store   *lua.Store
	space   keys.Space
	timeout time.Duration
	observe func(d time.Duration, err error)
}

// New returns a Client over rdb for buckets under prefix ("" means
// "shaper"). Each call is bounded by timeout (0 or less: by its context
// only) and reported to observe (nil: to nothing).
func New(rdb redis.Scripter, prefix string, timeout time.Duration, observe func(d time.Duration, err error)) *Client {
	return &Client{store: lua.New(rdb), space: keys.New(prefix), timeout: timeout, observe: observe}
}

// Key is the Redis key of bucket name's next_free.
func (c *Client) Key(name string) string { return c.space.Bucket(name) }

// Check refuses a call of cost units on bucket name at rate when cost is
// below 1 (limiters.ErrInvalidCost) or rate is invalid
// (sizing.ValidateRate).
func Check(name string, rate limiters.Limit, cost int64) error {
	if cost < 1 {
		return fmt.Errorf("%w: cost must be at least 1, got %d", limiters.ErrInvalidCost, cost)
	}
	if err := sizing.ValidateRate(rate); err != nil {
		return fmt.Errorf("shaping: bucket %q: %w", name, err)
	}
	return nil
}

// Interval is the µs one release of cost units occupies at rate, spaced
// sizing.PaceSlack wider when releases may start up to tol late (tol 0 or
// less: exact); math.MaxInt64 when it overflows.
func Interval(rate limiters.Limit, cost int64, tol time.Duration) int64 {
	iv, ok := rate.IntervalMicros(cost)
	if !ok {
		return math.MaxInt64
	}
	if tol > 0 {
		iv += int64(sizing.PaceSlack(rate, cost, tol) / time.Microsecond)
	}
	return iv
}

// Args are the script's arguments for slots of cost units on bucket name
// at rate with burst, each occupying interval µs (Interval's, or wider),
// that start within maxWait (less than 0: any wait). A slot or a burst
// allowance longer than sizing.MaxInterval is refused
// (limiters.ErrCostExceedsCapacity for the slot). The caller adds Slots,
// Now and a reservation's quota and answer arguments.
func Args(name string, rate limiters.Limit, burst, cost, interval int64, maxWait time.Duration) (lua.BucketArgs, error) {
	if interval > MaxIntervalUS {
		return lua.BucketArgs{}, fmt.Errorf("%w: cost %d at %s would hold downstream %q for more than %s", limiters.ErrCostExceedsCapacity, cost, rate.RateString(), name, sizing.MaxInterval)
	}
	burstUS, ok := rate.IntervalMicros(max(burst, 1) - 1)
	if !ok || burstUS > MaxIntervalUS {
		return lua.BucketArgs{}, fmt.Errorf("shaping: bucket %q: burst %d at %s is longer than %s", name, burst, rate.RateString(), sizing.MaxInterval)
	}
	mw := int64(-1)
	if maxWait >= 0 {
		mw = int64(maxWait / time.Microsecond)
	}
	return lua.BucketArgs{Interval: interval, Burst: burstUS, MaxWait: mw}, nil
}

// Run runs op on bucket name with a. Its error is an ErrBucket naming
// the bucket.
func (c *Client) Run(ctx context.Context, name string, op Op, a lua.BucketArgs) (lua.BucketReply, error) {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	start := time.Now()
	key := c.space.Bucket(name)
	var v lua.BucketReply
	var err error
	switch op {
	case Reserve:
		v, err = c.store.Reserve(ctx, key, a)
	case Peek:
		v, err = c.store.PeekBucket(ctx, key, a)
	case PushBack:
		v, err = c.store.PushBack(ctx, key, a)
	case Reset:
		err = c.store.ResetBucket(ctx, key)
	default:
		err = fmt.Errorf("unknown op %d", op)
	}
	if c.observe != nil {
		c.observe(time.Since(start), err)
	}
	if err != nil {
		return lua.BucketReply{}, fmt.Errorf("%w %q: %w", ErrBucket, name, err)
	}
	return v, nil
}

// Peek is the wait a reservation of cost units at rate (no burst, no
// quota, no late slack) would get on bucket name now, without reserving:
// how far ahead the bucket's next_free is.
func (c *Client) Peek(ctx context.Context, name string, rate limiters.Limit, cost int64) (time.Duration, error) {
	if err := Check(name, rate, cost); err != nil {
		return 0, err
	}
	a, err := Args(name, rate, 0, cost, Interval(rate, cost, 0), -1)
	if err != nil {
		return 0, err
	}
	a.Slots = 1
	v, err := c.Run(ctx, name, Peek, a)
	if err != nil {
		return 0, err
	}
	return time.Duration(v.Wait) * time.Microsecond, nil
}
