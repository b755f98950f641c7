// Package fairindex is a fair downstream's shared state in Redis: the
// weighted fair order of its admission keys over the tasks that wait in
// asynq's pending list (fair.lua),
// which the dispatchers' takes pick from (take.lua). Producers (package
// queue) park tasks; dispatchers (package shaping) feed due tasks into
// fair order. Package shaping re-exports its
// public names (shaping.Fairness, shaping.FairQueue).
package fairindex

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/control"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/limiters"
)

// Fairness shares a downstream's rate among the admission keys (the
// task's Key: tenant, user, API key) that have tasks waiting: each gets
// rate × its weight / the sum of the waiting keys' weights, and a key
// alone gets the whole rate (no slot idles while any key has work). A key
// that arrives late starts at once, not behind another key's backlog. See
// docs/algorithms.md, fair share, for how it works and its bounds.
//
// The zero value shares equally among keys, with no per-key ceiling.
type Fairness struct {
	// Weights by key; a key not listed has DefaultWeight. A weight is in
	// (0, MaxWeight].
	Weights map[string]float64
	// DefaultWeight is the weight of keys not in Weights; zero means 1.
	DefaultWeight float64
	// KeyRate, when set (Rate > 0), caps each key's rate, even when it is
	// alone, across every process: counted at the release, a key's units
	// released in any one-second window are at most KeyRate's units in a
	// second plus one task's cost (for tasks of cost 1: at most KeyRate + 1
	// releases). The take decides it as it reserves a key's slot; its tasks also join fair order at most that fast
	// (fair.lua's later set), so a take seldom picks a task that must wait
	// for it. Only Rate and
	// Period are read: a key has no burst.
	KeyRate limiters.Limit
	// KeyRates caps the keys listed at their own rate in place of KeyRate
	// (tiers: a premium tenant at 20/s, the rest at KeyRate), with the
	// same bound. A key in neither is capped only by the downstream's rate.
	KeyRates map[string]limiters.Limit
	// Runtime, when set, holds the operator's key controls in force (shaper
	// ctl key): a key's runtime rate or weight replaces the one above. The
	// dispatcher sets it on its own copy; nil: none.
	Runtime *KeyOverrides
}

// KeyOverrides are the key controls in force on one fair downstream, as
// the dispatcher last read them from Redis. Safe for concurrent use; the
// zero value holds none.
type KeyOverrides struct {
	cur atomic.Pointer[keyOverrides]
}

// keyOverrides is one set of key controls.
type keyOverrides struct {
	m map[string]control.KeyControl
}

// Set replaces every override with m (nil: none).
func (o *KeyOverrides) Set(m map[string]control.KeyControl) {
	o.cur.Store(&keyOverrides{m: m})
}

// Of is key's control in force; the zero KeyControl when none.
func (o *KeyOverrides) Of(key string) control.KeyControl {
	return o.All()[key]
}

// All is every key control in force (do not modify it).
func (o *KeyOverrides) All() map[string]control.KeyControl {
	if o == nil {
		return nil
	}
	if v := o.cur.Load(); v != nil {
		return v.m
	}
	return nil
}

// KeyRateOf is key's ceiling: its runtime rate, else its KeyRates entry,
// else KeyRate; a zero Rate means none.
func (f *Fairness) KeyRateOf(key string) limiters.Limit {
	if r := f.Runtime.Of(key).Rate; r.Rate > 0 {
		return r
	}
	if r, ok := f.KeyRates[key]; ok && r.Rate > 0 {
		return r
	}
	return f.KeyRate
}

// Paused reports whether the operator paused key (false without fair
// share: f nil).
func (f *Fairness) Paused(key string) bool { return f != nil && f.Runtime.Of(key).Paused }

// MaxWeight bounds a fair-share weight.
const MaxWeight = 1e6

// KeyTTL is the TTL of the fair-share keys, renewed by a park or a due
// move at most hourly. Should no process take for that long, the order
// is forgotten and the tasks, still in asynq's pending list, are served
// in its order: nothing is lost.
const KeyTTL = 25 * time.Hour

// Lookahead bounds how far ahead of its slot a fair downstream's task is
// taken (a take's look-ahead is shorter), so that a key arriving late is
// released within about this.
const Lookahead = 200 * time.Millisecond

// maxPerCall bounds the due moves of one script call.
const maxPerCall = 1000

// Weight is key's weight: its runtime weight, else Weights, else
// DefaultWeight.
func (f *Fairness) Weight(key string) float64 {
	if w := f.Runtime.Of(key).Weight; w > 0 {
		return w
	}
	if w, ok := f.Weights[key]; ok {
		return w
	}
	if f.DefaultWeight > 0 {
		return f.DefaultWeight
	}
	return 1
}

// Queue parks fair downstreams' tasks in weighted fair order (fair.lua),
// the order the dispatchers' takes pick from (take.lua). Producers park;
// dispatchers feed (due tasks into fair order). Safe for concurrent use.
// The zero Queue is not usable: New builds one.
type Queue struct {
	store *lua.Store
	space keys.Space
	now   func() time.Time // explicit script time (tests); nil reads Redis TIME
}

// New returns a Queue over rdb for key prefix ("" means "shaper").
func New(rdb redis.Scripter, prefix string) *Queue {
	return &Queue{store: lua.New(rdb), space: keys.New(prefix)}
}

// SetNow gives q's park and feed scripts an explicit clock (fair.lua's
// now), for step tests; nil goes back to Redis TIME. Call it before q is
// shared.
func (q *Queue) SetNow(now func() time.Time) { q.now = now }

// State is what a park or feed saw, after it.
type State struct {
	// Moved is how many tasks the call made ready to take (due tasks into
	// fair order, held tasks of a key no longer paused; Park: 1 when the
	// task is in fair order).
	Moved int
	// Parked tasks wait in fair order; Later ones are not yet due. After
	// Park, Parked is 1 (the task waits in asynq's pending list, or its
	// scheduled set until due, until a take picks it), or 0 when the
	// task was taken or deleted before it was parked.
	Parked, Later int
	// Keys is how many admission keys have tasks waiting.
	Keys int
	// Ahead (Park) is how many tasks go before this one: parked with an
	// earlier turn, and those in pending not in fair order (given back or
	// recovered); -1 when it is not yet due or its key is paused.
	Ahead int
}

func (q *Queue) args(ds string) ([]string, lua.FairArgs) {
	a := q.space.Asynq(ds)
	f := q.space.Fair(ds)
	ks := append(f.List(), a.Pending(), f.Controls, f.Held, f.Pos, a.Scheduled())
	fa := lua.FairArgs{Max: maxPerCall, TTLms: KeyTTL.Milliseconds(), TaskPrefix: a.TaskPrefix()}
	if q.now != nil {
		fa.NowMs = q.now().UnixMilli()
	}
	return ks, fa
}

// Park puts task id of downstream ds (just enqueued by asynq: pending, or
// scheduled at due) in fair order for key, due at due (zero: now).
func (q *Queue) Park(ctx context.Context, ds string, f *Fairness, id, key string, cost int64, due time.Time) (State, error) {
	ks, a := q.args(ds)
	t := lua.FairTask{ID: id, Key: key, Cost: max(cost, 1), Weight: f.Weight(key)}
	if !due.IsZero() {
		t.DueMs = due.UnixMilli()
	}
	if kr := f.KeyRateOf(key); kr.Rate > 0 {
		t.PerMs = float64(kr.Interval(1)) / float64(time.Millisecond)
	}
	rep, err := q.store.FairPark(ctx, ks, a, t)
	return state(rep), err
}

// Feed moves downstream ds's due tasks, and the held tasks of keys no
// longer paused, into fair order.
func (q *Queue) Feed(ctx context.Context, ds string) (State, error) {
	ks, a := q.args(ds)
	rep, err := q.store.FairFeed(ctx, ks, a)
	return state(rep), err
}

// Tend is Feed when downstream ds has tasks not yet due or held (a paused
// key's); otherwise it costs an EXISTS and an HLEN, and its State has
// only Keys (Parked and Later are -1: not read).
func (q *Queue) Tend(ctx context.Context, ds string) (State, error) {
	ks, a := q.args(ds)
	rep, err := q.store.FairTend(ctx, ks, a)
	return state(rep), err
}

// Resume moves up to limit of key's held tasks (kept out of fair order
// while the key was paused) back to their turns on downstream ds; it
// returns how many it moved. Call it until it
// moves fewer than limit (feeds also move a few per call).
func (q *Queue) Resume(ctx context.Context, ds string, key string, limit int) (int, error) {
	ks, a := q.args(ds)
	rep, err := q.store.FairResume(ctx, ks, a, key, int64(limit))
	return int(rep.Parked), err
}

// ExpectedStart estimates when a task just parked (the state Park
// returned) of cost at rate will be released: pending and the parked
// tasks before it go first, one interval each, then the takes' horizon
// (Lookahead). Keys that arrive later with an earlier turn are not
// foreseen.
func (st State) ExpectedStart(now time.Time, rate limiters.Limit, cost int64) time.Time {
	return now.Add(Lookahead + rate.Interval(max(cost, 1))*time.Duration(max(st.Ahead, 0)))
}

func state(r lua.FairReply) State {
	return State{Moved: int(r.Moved), Parked: int(r.Parked), Later: int(r.Later), Keys: int(r.Keys), Ahead: int(r.Ahead)}
}
