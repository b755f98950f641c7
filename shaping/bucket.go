package shaping

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/bucket"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/sizing"
	"github.com/shaper-io/shaper/limiters"
)

// ErrBucket: the shaping script failed or timed out. Shaping fails closed:
// no release happens without a reservation.
var ErrBucket = bucket.ErrBucket

// MaxInterval is the furthest one call may move a bucket's next_free: the
// interval of one reservation's cost, a pushback, or the burst allowance.
// Past it Reserve refuses the cost (ErrCostExceedsCapacity) and PushBack
// clamps, so no task or reply can park a downstream for longer than this
// (and `shaper ctl reset` clears a bucket at once). lua/shaping.lua checks
// the same bound.
const MaxInterval = sizing.MaxInterval

// Bucket names a downstream's shaping bucket and the rate it releases at.
// The zero Bucket is invalid (no rate).
type Bucket struct {
	// Name is the downstream's name; its bucket key is keys' Bucket(Name).
	Name string
	// Rate is the release rate: Rate.Rate units per Rate.Period. Only
	// those two fields are read; Rate.Burst is ignored (whatever its value),
	// since the burst of a shaping bucket is Burst.
	Rate limiters.Limit
	// Burst is how many releases may go back to back after an idle spell;
	// 0 (the zero value) or 1 means none: every release is spaced by the
	// interval of its cost.
	Burst int64
	// MaxCost is the largest cost Reserve accepts; 0 means any cost whose
	// interval is within MaxInterval. A larger cost is refused with
	// ErrCostExceedsCapacity, never reserved.
	MaxCost int64
	// LateTolerance is how late a release may start after its slot (0 or
	// negative: not bounded here). When it is a slot or more, slots are
	// spaced by sizing.PaceSlack more than the exact interval, so that
	// releases that late still put at most rate + 1 in any second.
	LateTolerance time.Duration
	// Quotas are checked by Reserve and ReserveN in the same script call:
	// a slot needs room in each (see Quota).
	Quotas []Quota
}

// DefaultMaxCost is the largest cost a downstream accepts unless it
// declares its own: what its bucket holds, i.e. the units rate × maxWait
// lets through, or its burst, and at least 1.
func DefaultMaxCost(rate limiters.Limit, maxWait time.Duration, burst int64) int64 {
	return sizing.DefaultMaxCost(rate, maxWait, burst)
}

// Reservation is what Reserve decided.
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
	// Count is how many consecutive slots were reserved (ReserveN; 1 for
	// Reserve when OK, 0 when not).
	Count int
	// Quotas is the state of each of the bucket's quotas after the call.
	Quotas []QuotaUse
	// HeldBy says what delayed the first slot, or, when !OK, kept it past
	// maxWait, beyond the bucket's own backlog: "" nothing, "quota <q>" a
	// quota, "announced" the downstream's announced limit (spent) and
	// "announced pace" its pace (slots spaced wider than the rate), and
	// "priority" waiters of a higher priority in another process (ReserveFor).
	HeldBy string
	// base and interval place slot j: max(base + j·interval, Now); slot
	// j's units were issued up to issued + (j+1)·cost (answers use it).
	base     time.Time
	interval time.Duration
	issued   int64
	// due is the slot on the local clock for a release that checks its
	// lateness (runner.skipLate); zero for none.
	due  time.Time
	cost int64
}

// Slot is the (first) reserved slot's start on the Redis clock.
func (r Reservation) Slot() time.Time { return r.Now.Add(r.Wait) }

// seqN is the issued count just after slot j's units.
func (r Reservation) seqN(j int) int64 { return r.issued + int64(j+1)*r.cost }

// SlotN is the start of reserved slot j (0 ≤ j < Count) on the Redis clock.
func (r Reservation) SlotN(j int) time.Time {
	t := r.base.Add(time.Duration(j) * r.interval)
	if t.Before(r.Now) {
		return r.Now
	}
	return t
}

// Buckets runs the shaping script for any number of buckets. Safe for
// concurrent use.
// The zero Buckets is not usable: NewBuckets builds one.
type Buckets struct {
	c       *bucket.Client // reservations, peeks, pushbacks and resets
	store   *lua.Store     // settlements (after a call)
	space   keys.Space
	timeout time.Duration                    // WithTimeout's, handed to c
	observe func(d time.Duration, err error) // WithObserver's, handed to c
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
	b := &Buckets{store: lua.New(rdb), space: keys.New(prefix), timeout: bucket.DefaultTimeout}
	for _, o := range opts {
		o(b)
	}
	b.c = bucket.New(rdb, prefix, b.timeout, b.observe)
	return b
}

// Reset clears bucket name: its next_free is forgotten, so the next
// reservation starts now. For an operator undoing a pushback or a cost
// that parked the downstream (`shaper ctl reset`).
func (s *Buckets) Reset(ctx context.Context, name string) error {
	_, err := s.run(ctx, Bucket{Name: name}, bucket.Reset, lua.BucketArgs{MaxWait: -1})
	return err
}

// Key is the Redis key of bucket name's next_free.
func (s *Buckets) Key(name string) string { return s.c.Key(name) }

// Reserve reserves a slot for cost units on b if its wait is at most
// maxWait (maxWait < 0: any wait). Reservations are atomic across every
// process sharing the Redis: slots never overlap, so releases at their
// slots never exceed the rate.
func (s *Buckets) Reserve(ctx context.Context, b Bucket, cost int64, maxWait time.Duration) (Reservation, error) {
	return s.call(ctx, b, cost, maxWait, bucket.Reserve, 0, 1, Claim{})
}

// ReserveN reserves up to n consecutive slots of cost units each in one
// call: as many as start within maxWait (at least one, or none when the
// first would not). Slot j is Reservation.SlotN(j). It is how a process
// serves all its waiting workers with one script call instead of one each.
func (s *Buckets) ReserveN(ctx context.Context, b Bucket, cost int64, n int, maxWait time.Duration) (Reservation, error) {
	return s.ReserveFor(ctx, b, cost, n, maxWait, Claim{})
}

// Claim is the priority of the waiters a reservation is for. Across every
// process, a reservation for waiters of a lower priority gets nothing
// (HeldBy "priority") while waiters of a higher one found no slot
// elsewhere in the last few intervals and have not been served since; the
// zero Claim takes no part.
type Claim struct {
	Level   int // 1 (first) to 5 (last); 0: none
	Waiting int // how many waiters of Level the caller holds (at least n)
}

// ReserveFor is ReserveN for waiters of priority c.
func (s *Buckets) ReserveFor(ctx context.Context, b Bucket, cost int64, n int, maxWait time.Duration, c Claim) (Reservation, error) {
	if n < 1 || n > maxSlotsPerCall {
		return Reservation{}, fmt.Errorf("shaping: bucket %q: n must be 1-%d, got %d", b.Name, maxSlotsPerCall, n)
	}
	return s.call(ctx, b, cost, maxWait, bucket.Reserve, 0, n, c)
}

// claimTTL is how long a claim of priority stands without being renewed:
// a few intervals of cost (a claimant asks again within about two), and
// at least claimFloor.
func claimTTL(b Bucket, cost int64) int64 {
	return max(3*b.interval(cost), int64(claimFloor/time.Microsecond))
}

const claimFloor = 50 * time.Millisecond

// maxSlotsPerCall is the script's cap on ReserveN's n.
const maxSlotsPerCall = 1000

// Peek reports the wait a reservation would get, without reserving.
func (s *Buckets) Peek(ctx context.Context, b Bucket, cost int64) (Reservation, error) {
	return s.call(ctx, b, cost, -1, bucket.Peek, 0, 1, Claim{})
}

// PushBack moves b's next_free to at least now+d: every process's next
// reservation waits for it. For a downstream that said "retry after d".
func (s *Buckets) PushBack(ctx context.Context, b Bucket, d time.Duration) (time.Time, error) {
	r, err := s.pushBack(ctx, b, d)
	return r.NextFree, err
}

// pushBack is PushBack's reply: NextFree and the Redis clock's Now.
func (s *Buckets) pushBack(ctx context.Context, b Bucket, d time.Duration) (Reservation, error) {
	d = min(max(d, 0), MaxInterval)
	return s.run(ctx, b, bucket.PushBack, lua.BucketArgs{Interval: int64(d / time.Microsecond), MaxWait: -1})
}

// interval is the µs a release of cost occupies in b: the rate's
// interval with the late tolerance's slack (bucket.Interval), at least a
// spread quota's.
func (b Bucket) interval(cost int64) int64 {
	interval := bucket.Interval(b.Rate, cost, b.LateTolerance)
	for _, q := range b.Quotas {
		interval = max(interval, q.SpreadInterval(cost))
	}
	return interval
}

func (s *Buckets) call(ctx context.Context, b Bucket, cost int64, maxWait time.Duration, o bucket.Op, now int64, n int, c Claim) (Reservation, error) {
	a, err := s.args(b, cost, maxWait, o, c)
	if err != nil {
		return Reservation{}, err
	}
	a.Now, a.Slots = now, int64(n)
	if a.Claim.Level > 0 {
		a.Claim.Waiting = max(a.Claim.Waiting, int64(n))
	}
	return s.run(ctx, b, o, a)
}

// TakeArgs are the reservation a take makes for b's tasks, one unit
// each, in the call that moves them (take.Downstream.Reserve): its max
// wait, now and slots are the take's.
func (s *Buckets) TakeArgs(b Bucket) (lua.BucketArgs, error) {
	return s.args(b, 1, 0, bucket.Reserve, Claim{})
}

// args are the script's arguments for op o on b for slots of cost.
func (s *Buckets) args(b Bucket, cost int64, maxWait time.Duration, o bucket.Op, c Claim) (lua.BucketArgs, error) {
	if err := bucket.Check(b.Name, b.Rate, cost); err != nil {
		return lua.BucketArgs{}, err
	}
	if b.MaxCost > 0 && cost > b.MaxCost {
		return lua.BucketArgs{}, fmt.Errorf("%w: cost %d > max cost %d of downstream %q", limiters.ErrCostExceedsCapacity, cost, b.MaxCost, b.Name)
	}
	for _, q := range b.Quotas {
		if cost > q.Limit {
			return lua.BucketArgs{}, fmt.Errorf("%w: cost %d > quota %s of downstream %q", limiters.ErrCostExceedsCapacity, cost, q, b.Name)
		}
	}
	a, err := bucket.Args(b.Name, b.Rate, b.Burst, cost, b.interval(cost), maxWait)
	if err != nil {
		return lua.BucketArgs{}, err
	}
	if o == bucket.Reserve {
		a.Answers, a.Cost, a.Guard, a.Quotas = s.answerKeys(b.Name), cost, b.quotaGuard(cost), s.quotaArgs(b)
		a.Claims = s.claimsKey(b.Name)
		if c.Level >= 1 && c.Level <= 5 {
			a.Claim = lua.Claim{Level: int64(c.Level), TTL: claimTTL(b, cost), Waiting: int64(c.Waiting)}
		}
	}
	return a, nil
}

func (s *Buckets) run(ctx context.Context, b Bucket, o bucket.Op, a lua.BucketArgs) (Reservation, error) {
	v, err := s.c.Run(ctx, b.Name, o, a)
	if err != nil {
		return Reservation{}, err
	}
	return reservation(b, a, v), nil
}

// reservation reads the script's reply v to a reservation on b with a.
func reservation(b Bucket, a lua.BucketArgs, v lua.BucketReply) Reservation {
	res := Reservation{
		OK:       v.Reserved >= 1,
		Count:    int(v.Reserved),
		Wait:     time.Duration(v.Wait) * time.Microsecond,
		NextFree: time.UnixMicro(v.NextFree),
		Now:      time.UnixMicro(v.Now),
		HeldBy:   heldBy(b, v.HeldBy),
		base:     time.UnixMicro(v.Base),
		interval: time.Duration(max(v.Interval, a.Interval)) * time.Microsecond,
		issued:   v.Issued,
		cost:     max(a.Cost, 1),
	}
	for i, u := range v.Quotas {
		qu := QuotaUse{Quota: b.Quotas[i], Used: u.Used}
		if u.Reset > 0 {
			qu.Reset = time.UnixMicro(u.Reset)
		}
		res.Quotas = append(res.Quotas, qu)
	}
	return res
}

// heldBy names the script's held_by.
func heldBy(b Bucket, v int64) string {
	switch {
	case v == -1:
		return "announced"
	case v == -2:
		return "announced pace"
	case v == -3:
		return "priority"
	case v >= 1 && int(v) <= len(b.Quotas):
		return "quota " + b.Quotas[v-1].String()
	}
	return ""
}

// pace is the units per second the announced limit paced res at; 0 when
// it did not.
func (res Reservation) pace() float64 {
	if res.HeldBy != "announced pace" || res.interval <= 0 {
		return 0
	}
	return float64(res.cost) / res.interval.Seconds()
}

// quotaGuard is how long past its slot a quota counts a release of cost
// units: its late tolerance plus the margin, at most a quarter of the
// shortest window.
func (b Bucket) quotaGuard(cost int64) int64 {
	if len(b.Quotas) == 0 {
		return 0
	}
	tol := b.LateTolerance
	if tol <= 0 {
		tol = sizing.LateTolerance(b.Rate, cost)
	}
	g := time.Duration(1<<63 - 1)
	for _, q := range b.Quotas {
		m := q.Margin
		if m == 0 {
			m = DefaultQuotaMargin
		}
		g = min(g, tol+m, q.Per/4)
	}
	return g.Microseconds()
}

// quotaArgs are the quotas' script arguments.
func (s *Buckets) quotaArgs(b Bucket) []lua.QuotaArgs {
	out := make([]lua.QuotaArgs, 0, len(b.Quotas))
	for _, q := range b.Quotas {
		a := lua.QuotaArgs{Key: s.space.Quota(b.Name, q.Shape()), Limit: q.Limit, Period: q.Per.Microseconds(),
			Sub: q.Sub(), Align: -1}
		if q.Aligned {
			a.Align = q.Offset.Microseconds()
		}
		out = append(out, a)
	}
	return out
}

func (s *Buckets) answerKeys(name string) lua.AnswerKeys {
	return lua.AnswerKeys{Announced: s.space.Announced(name), Issued: s.space.Issued(name)}
}

// claimsKey is the HASH of downstream name's priority claims.
func (s *Buckets) claimsKey(name string) string { return s.space.PriorityClaims(name) }

// Limits is what a downstream's quotas and announced limit looked like to
// this process at its last reservation and its last answer that carried a
// limit (for status pages).
type Limits struct {
	// Quotas is each quota's state at the last reservation.
	Quotas []QuotaUse
	// HeldBy is what held the last reservation ("" none; see
	// Reservation.HeldBy).
	HeldBy string
	// Pace is the pace the announced limit imposed on the last
	// reservation, in units per second; 0 when none did.
	Pace float64
	// Announced is the last binding limit this process's answers
	// announced; the zero value when none did.
	Announced Announced
	// Clamp is the last answer whose hold or cost this process cut or
	// refused; the zero value when none was.
	Clamp Clamp
}

// Announced is a limit a downstream's answer announced.
type Announced struct {
	// Source is the header that said it: ratelimit, x-ratelimit or
	// retry-after.
	Source string
	// Remaining and Limit are what the answer said (Limit 0: not said).
	Remaining, Limit int64
	// Left is what the announcement in force left after it (the
	// downstream's count less what was reserved after the task).
	Left int64
	// Reset is when its window resets.
	Reset time.Time
	// Effect is hold (nothing left until Reset), pace (less left than the
	// rate would spend) or stale (a later answer's is in force).
	Effect string
	// Header is the answer's field lines it was read from.
	Header string
}

// Clamp is the last answer of a downstream whose hold or cost was cut or
// refused.
type Clamp struct {
	// What is hold, cost_high or cost_low.
	What string
	// Header is the answer's field that said it (e.g. "Retry-After:
	// 99999999"); for costs, the reported cost.
	Header string
	// Said is what the answer asked for: the hold, or the cost in units.
	Said string
	// Applied is what was applied instead ("" for a refused cost).
	Applied string
	// At is when this process saw it.
	At time.Time
}
