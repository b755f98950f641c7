package shaping

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/control"
	"github.com/shaper-io/shaper/internal/fairindex"
	"github.com/shaper-io/shaper/limiters"
)

// Fairness shares a downstream's rate among the admission keys (the
// task's Key: tenant, user, API key) that have tasks waiting: each gets
// rate × its weight / the sum of the waiting keys' weights, and a key
// alone gets the whole rate (no slot idles while any key has work). A key
// that arrives late starts at once, not behind another key's backlog. See
// docs/algorithms.md, fair share, for how it works and its bounds. Its
// fields (Weights, DefaultWeight, KeyRate: a per-key ceiling) are
// documented on fairindex.Fairness, the type it names, which producers
// (queue.FairShare) share.
//
// The zero value shares equally among keys, with no per-key ceiling.
type Fairness = fairindex.Fairness

// KeyControl is the operator's setting for one admission key of a fair
// downstream (Control.SetKey): its own rate, weight or pause, in every
// process. See control.KeyControl, the type it names.
type KeyControl = control.KeyControl

// MaxFairWeight bounds a fair-share weight.
const MaxFairWeight = fairindex.MaxWeight

// FairHorizon is how far ahead a fair downstream's task is scheduled in
// asynq while it waits in fair order. Were no process to promote tasks
// for that long, asynq would release them in FIFO order: nothing is lost.
const FairHorizon = fairindex.Horizon

// FairTarget is how many promoted tasks a fair downstream at rate keeps
// in asynq's pending list: about 500ms of releases, at least 2 (see
// fairindex.Target).
func FairTarget(rate limiters.Limit) int64 { return fairindex.Target(rate) }

// FairQueue parks fair downstreams' tasks in weighted fair order and
// promotes them into asynq's pending list (fair.lua). Producers park;
// dispatchers feed and exchange service. Safe for concurrent use.
type FairQueue = fairindex.Queue

// NewFairQueue returns a FairQueue over rdb for key prefix ("" means
// "shaper").
func NewFairQueue(rdb redis.Scripter, prefix string) *FairQueue { return fairindex.New(rdb, prefix) }

// FairState is what a park or feed saw, after it.
type FairState = fairindex.State

// feedEvery is how often a dispatcher promotes while tasks wait: half the
// time the pending target lasts, between 100ms and PollInterval.
func feedEvery(rate limiters.Limit, poll time.Duration) time.Duration {
	d := time.Duration(float64(FairTarget(rate)) / rate.PerSec() * float64(time.Second) / 2)
	return max(min(d, poll), 100*time.Millisecond)
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
// a fair downstream (fairindex.Lookahead), where a late key must not wait
// behind slots already reserved for others, and on a downstream with
// priorities (priorityLookahead), where a task of a higher priority must
// not wait behind slots already reserved for lower ones.
func (r *runner) lookahead() time.Duration {
	la := r.ds.MaxWait
	if r.ds.Fairness != nil {
		la = min(la, fairindex.Lookahead)
	}
	if r.ds.Priority != nil {
		la = min(la, max(2*r.rate.Load().Interval(1), priorityLookahead))
	}
	return la
}

// priorityLookahead is the least a downstream with priorities reserves
// ahead (more at a rate slower than two slots in it): a task of priority
// 1 then waits for at most about this, plus one slot to be taken.
const priorityLookahead = 20 * time.Millisecond
