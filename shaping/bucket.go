package shaping

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/lua"
)

// ErrBucket: the shaping script failed or timed out. Shaping fails closed:
// no release happens without a reservation.
var ErrBucket = errors.New("shaping: bucket")

// Bucket names a downstream's shaping bucket and the rate it releases at.
// Only Rate.Rate and Rate.Period are read; the burst is Burst.
type Bucket struct {
	Name  string
	Rate  limiters.Limit
	Burst int64 // releases allowed back to back after idle; 0 or 1 means none
}

// Reservation is the answer of Reserve.
type Reservation struct {
	// OK reports whether a slot was reserved. When false nothing was
	// written: the wait would have passed maxWait (the bucket is full).
	OK bool
	// Wait is how long after Now the slot starts (the wait the slot would
	// have had, when !OK). Release no earlier than Now+Wait.
	Wait time.Duration
	// Now is the Redis server's time of the decision.
	Now time.Time
	// NextFree is the bucket's next_free after the call.
	NextFree time.Time
}

// Slot is the reserved slot's start on the Redis clock.
func (r Reservation) Slot() time.Time { return r.Now.Add(r.Wait) }

// Buckets runs the shaping script for any number of buckets. Safe for
// concurrent use.
type Buckets struct {
	rdb     redis.Scripter
	space   keys.Space
	timeout time.Duration
	observe func(d time.Duration, err error)
}

// BucketsOption configures Buckets.
type BucketsOption func(*Buckets)

// WithTimeout bounds each script call (default 2s).
func WithTimeout(d time.Duration) BucketsOption { return func(b *Buckets) { b.timeout = d } }

// WithObserver reports each script call's latency and error (for metrics).
func WithObserver(f func(d time.Duration, err error)) BucketsOption {
	return func(b *Buckets) { b.observe = f }
}

// NewBuckets returns a client for buckets under prefix ("" = "shaper").
func NewBuckets(rdb redis.Scripter, prefix string, opts ...BucketsOption) *Buckets {
	b := &Buckets{rdb: rdb, space: keys.New(prefix), timeout: 2 * time.Second}
	for _, o := range opts {
		o(b)
	}
	return b
}

// Key is the Redis key of bucket name's next_free.
func (s *Buckets) Key(name string) string { return s.space.Bucket(name) }

// Reserve reserves a slot for cost units on b if its wait is at most
// maxWait (maxWait < 0: any wait). Reservations are atomic across every
// process sharing the Redis: slots never overlap, so releases at their
// slots never exceed the rate.
func (s *Buckets) Reserve(ctx context.Context, b Bucket, cost int64, maxWait time.Duration) (Reservation, error) {
	return s.call(ctx, b, cost, maxWait, lua.ModeCharge, 0)
}

// ReserveAt is Reserve at an explicit time (tests only: production uses
// the Redis clock so every host agrees).
func (s *Buckets) ReserveAt(ctx context.Context, now time.Time, b Bucket, cost int64, maxWait time.Duration) (Reservation, error) {
	return s.call(ctx, b, cost, maxWait, lua.ModeCharge, now.UnixMicro())
}

// Peek reports the wait a reservation would get, without reserving.
func (s *Buckets) Peek(ctx context.Context, b Bucket, cost int64) (Reservation, error) {
	return s.call(ctx, b, cost, -1, lua.ModePeek, 0)
}

// PushBack moves b's next_free to at least now+d: every process's next
// reservation waits for it. For a downstream that said "retry after d".
func (s *Buckets) PushBack(ctx context.Context, b Bucket, d time.Duration) (time.Time, error) {
	if d < 0 {
		d = 0
	}
	r, err := s.run(ctx, b, int64(d/time.Microsecond), 0, -1, lua.ModeRefund, 0)
	return r.NextFree, err
}

func (s *Buckets) call(ctx context.Context, b Bucket, cost int64, maxWait time.Duration, mode int, now int64) (Reservation, error) {
	if cost < 1 {
		return Reservation{}, fmt.Errorf("%w: cost must be at least 1, got %d", limiters.ErrInvalidCost, cost)
	}
	if err := b.Rate.Validate(); err != nil {
		return Reservation{}, fmt.Errorf("shaping: bucket %q: %w", b.Name, err)
	}
	burst := max(b.Burst, 1)
	interval := int64(b.Rate.Interval(cost) / time.Microsecond)
	burstUS := (burst - 1) * int64(b.Rate.Interval(1)/time.Microsecond)
	mw := int64(-1)
	if maxWait >= 0 {
		mw = int64(maxWait / time.Microsecond)
	}
	return s.run(ctx, b, interval, burstUS, mw, mode, now)
}

func (s *Buckets) run(ctx context.Context, b Bucket, a1, a2, a3 int64, mode int, now int64) (Reservation, error) {
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	start := time.Now()
	v, err := lua.Shaping.Run(ctx, s.rdb, []string{s.space.Bucket(b.Name)}, a1, a2, a3, mode, now).Int64Slice()
	if err == nil && len(v) != 4 {
		err = fmt.Errorf("reply has %d fields, want 4", len(v))
	}
	if s.observe != nil {
		s.observe(time.Since(start), err)
	}
	if err != nil {
		return Reservation{}, fmt.Errorf("%w %q: %w", ErrBucket, b.Name, err)
	}
	return Reservation{
		OK:       v[0] == 1,
		Wait:     time.Duration(v[1]) * time.Microsecond,
		NextFree: time.UnixMicro(v[2]),
		Now:      time.UnixMicro(v[3]),
	}, nil
}
