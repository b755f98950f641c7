package shaping

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

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
	// (0, MaxFairWeight].
	Weights map[string]float64
	// DefaultWeight is the weight of keys not in Weights; zero means 1.
	DefaultWeight float64
	// KeyRate, when set (Rate > 0), caps each key's rate, even when it is
	// alone, across every process: counted at the release, a key's units
	// released in any one-second window are at most KeyRate's units in a
	// second plus one task's cost (for tasks of cost 1: at most KeyRate + 1
	// releases). The lane decides it before it reserves a key's slot
	// (keyCeiling); its tasks are also promoted at most that fast (fair.lua),
	// so workers seldom hold a task that must wait for it. Only Rate and
	// Period are read: a key has no burst.
	KeyRate limiters.Limit
}

// MaxFairWeight bounds a fair-share weight.
const MaxFairWeight = 1e6

// FairHorizon is how far ahead a fair downstream's task is scheduled in
// asynq while it waits in fair order. Were no process to promote tasks
// for that long, asynq would release them in FIFO order: nothing is lost.
const FairHorizon = 24 * time.Hour

// fairTTL is the TTL of the fair-share keys: the horizon plus a margin.
const fairTTL = FairHorizon + time.Hour

// fairLookahead bounds how far ahead a fair downstream's lane reserves
// slots, so that a key arriving late is released within about this plus
// one promotion round.
const fairLookahead = 200 * time.Millisecond

// fairMaxPerCall bounds the promotions of one script call.
const fairMaxPerCall = 1000

// Weight is key's weight.
func (f *Fairness) Weight(key string) float64 {
	if w, ok := f.Weights[key]; ok {
		return w
	}
	if f.DefaultWeight > 0 {
		return f.DefaultWeight
	}
	return 1
}

func (f *Fairness) validate() error {
	if f.DefaultWeight < 0 || f.DefaultWeight > MaxFairWeight || math.IsNaN(f.DefaultWeight) {
		return fmt.Errorf("Fairness.DefaultWeight must be in (0, %g], got %g", float64(MaxFairWeight), f.DefaultWeight)
	}
	for k, w := range f.Weights {
		if !(w > 0 && w <= MaxFairWeight) {
			return fmt.Errorf("Fairness.Weights[%q] must be in (0, %g], got %g", k, float64(MaxFairWeight), w)
		}
	}
	if f.KeyRate.Rate != 0 {
		if err := validateRate(f.KeyRate); err != nil {
			return fmt.Errorf("Fairness.KeyRate: %w", err)
		}
	}
	return nil
}

// FairTarget is how many promoted tasks a fair downstream at rate keeps
// in asynq's pending list: about 500ms of releases, at least 2. Workers
// take from there as they free up; the rest waits in fair order. It must
// not run dry under a backlog: a worker pool that finds the list empty
// sleeps for the poll interval (asynq's TaskCheckInterval), and its
// process then releases only what it holds. A key's first task does not
// wait behind it (fair.lua puts it at the front).
func FairTarget(rate limiters.Limit) int64 {
	return min(max(int64(math.Ceil(rate.PerSec()/2)), 2), fairMaxPerCall)
}

// feedEvery is how often a dispatcher promotes while tasks wait: half the
// time the pending target lasts, between 100ms and PollInterval.
func feedEvery(rate limiters.Limit, poll time.Duration) time.Duration {
	d := time.Duration(float64(FairTarget(rate)) / rate.PerSec() * float64(time.Second) / 2)
	return max(min(d, poll), 100*time.Millisecond)
}

// FairQueue parks fair downstreams' tasks in weighted fair order and
// promotes them into asynq's pending list (fair.lua). Producers park;
// dispatchers feed.
type FairQueue struct {
	store *lua.Store
	space keys.Space
	now   func() time.Time // explicit script time (tests); nil reads Redis TIME
}

// NewFairQueue returns a FairQueue over rdb for key prefix ("" means
// "shaper").
func NewFairQueue(rdb redis.Scripter, prefix string) *FairQueue {
	return &FairQueue{store: lua.New(rdb), space: keys.New(prefix)}
}

// FairState is what a park or feed saw, after it.
type FairState struct {
	// Promoted is how many tasks the call moved to the pending list.
	Promoted int
	// Parked tasks wait in fair order; Later ones are not yet due.
	Parked, Later int
	// Pending and Active are the asynq queue's pending and active lengths.
	Pending, Active int
	// Keys is how many admission keys have tasks waiting.
	Keys int
	// Ahead (Park) is how many tasks go before this one: promoted ahead of
	// it, and parked with an earlier turn (0 when it went to the front);
	// -1 when it is not yet due.
	Ahead int
}

func (q *FairQueue) args(ds string, rate limiters.Limit) ([]string, lua.FairArgs) {
	a := q.space.Asynq(ds)
	ks := append(q.space.Fair(ds).List(), a.Scheduled(), a.Pending(), a.Active())
	fa := lua.FairArgs{TaskPrefix: a.TaskPrefix(), Target: FairTarget(rate), Max: fairMaxPerCall, TTLms: fairTTL.Milliseconds()}
	if q.now != nil {
		fa.NowMs = q.now().UnixMilli()
	}
	return ks, fa
}

// Park puts task id of downstream ds (enqueued in asynq scheduled at
// least FairHorizon ahead) in fair order for key, due at due (zero: now),
// and promotes what fits under the downstream's target at rate.
func (q *FairQueue) Park(ctx context.Context, ds string, rate limiters.Limit, f *Fairness, id, key string, cost int64, due time.Time) (FairState, error) {
	ks, a := q.args(ds, rate)
	t := lua.FairTask{ID: id, Key: key, Cost: max(cost, 1), Weight: f.Weight(key)}
	if !due.IsZero() {
		t.DueMs = due.UnixMilli()
	}
	if f.KeyRate.Rate > 0 {
		t.PerMs = float64(f.KeyRate.Interval(1)) / float64(time.Millisecond)
	}
	rep, err := q.store.FairPark(ctx, ks, a, t)
	return fairState(rep), err
}

// Feed moves downstream ds's due tasks into fair order and promotes what
// fits under its target at rate.
func (q *FairQueue) Feed(ctx context.Context, ds string, rate limiters.Limit) (FairState, error) {
	ks, a := q.args(ds, rate)
	rep, err := q.store.FairFeed(ctx, ks, a)
	return fairState(rep), err
}

// Exchange adds this process's service increments on downstream ds (units
// per weight served since its last exchange, by key) to the service all
// processes share, starting a key the count does not hold at its lifted
// service, if any (fairOrder.lift), and returns the shared service of the
// keys in want (fairsvc.lua; see fairOrder), as of clk's now (Redis TIME
// for the real clock: lua.NowArg).
func (q *FairQueue) Exchange(ctx context.Context, ds string, clk Clock, inc, lifted map[string]float64, want []string) (map[string]float64, error) {
	v, err := q.store.FairService(ctx, q.space.Fair(ds).Service, fairMemory, lua.NowArg(clk)/1000, inc, lifted, want)
	if err != nil {
		return nil, err
	}
	out := make(map[string]float64, len(want))
	for i, k := range want {
		out[k] = v[i]
	}
	return out, nil
}

// ExpectedStart estimates when a task just parked (the state Park
// returned) of cost at rate will be released: the promoted tasks and the
// parked ones before it go first, one interval each, then the lane's
// reservation horizon. The workers' held tasks are not counted: the lanes
// let keys with few waiters pass them. Keys that arrive later with an
// earlier turn are not foreseen.
func (st FairState) ExpectedStart(now time.Time, rate limiters.Limit, cost int64) time.Time {
	return now.Add(fairLookahead + rate.Interval(max(cost, 1))*time.Duration(max(st.Ahead, 0)))
}

func fairState(r lua.FairReply) FairState {
	return FairState{Promoted: int(r.Promoted), Parked: int(r.Parked), Later: int(r.Later), Pending: int(r.Pending),
		Active: int(r.Active), Keys: int(r.Keys), Ahead: int(r.Ahead)}
}

// fairIdleFeed is how often a dispatcher looks for parked tasks when none
// waited at its last look. Enqueues promote what fits themselves, so this
// only matters when a backlog starts: pending then holds its target (half
// a second of releases) and the workers hold their share of the bucket.
const fairIdleFeed = time.Second

// feed promotes the downstream's parked tasks while the dispatcher runs:
// every fair interval while tasks wait, every fairIdleFeed when none do.
func (r *runner) feed() {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), r.d.cfg.RedisTimeout)
		st, err := r.d.fair.Feed(ctx, r.ds.Name, *r.rate.Load())
		cancel()
		wait := fairIdleFeed
		switch {
		case err != nil:
			r.d.log.Warn("shaping: fair share: cannot promote tasks", "downstream", r.ds.Name, "err", err)
		case st.Parked+st.Later > 0:
			wait = feedEvery(*r.rate.Load(), r.d.cfg.PollInterval)
		}
		if err == nil {
			r.fairSeen(st)
			if st.Promoted > 0 {
				r.wakeTake()
			}
		}
		r.lane.exchange()
		t := r.d.cfg.Clock.NewTimer(wait)
		select {
		case <-t.C():
		case <-r.d.stopping:
			t.Stop()
			return
		}
	}
}

// fairSeen records what a feed saw.
func (r *runner) fairSeen(st FairState) {
	if m := r.d.m; m != nil {
		m.Fair.ActiveKeys.WithLabelValues(r.ds.Name).Set(float64(st.Keys))
		m.Fair.Waiting.WithLabelValues(r.ds.Name).Set(float64(st.Parked + st.Later))
	}
	r.fstats.publish(r.d.m, r.ds.Name, r.ds.Fairness, r.d.cfg.Clock.Now())
	r.smu.Lock()
	r.fairSt = st
	r.smu.Unlock()
}

// lookahead is how far ahead the lane reserves slots: MaxWait, or less on
// a fair downstream (fairLookahead), where a late key must not wait
// behind slots already reserved for others.
func (r *runner) lookahead() time.Duration {
	if r.ds.Fairness != nil {
		return min(r.ds.MaxWait, fairLookahead)
	}
	return r.ds.MaxWait
}
