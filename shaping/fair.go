package shaping

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/control"
	"github.com/shaper-io/shaper/internal/fairindex"
	"github.com/shaper-io/shaper/limiters"
)

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

// NewFairQueue returns a FairQueue over rdb for key prefix ("" means
// "shaper").
func NewFairQueue(rdb redis.Scripter, prefix string) *FairQueue { return fairindex.New(rdb, prefix) }

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

// exchange shares a fair lane's service per key with the other processes'
// (fairOrder): one script call, from the feed loop.
func (l *lane) exchange() {
	if l.fair == nil {
		return
	}
	l.r.smu.Lock()
	keys := l.r.fairSt.Keys
	l.r.smu.Unlock()
	l.mu.Lock()
	l.fair.activeKeys = keys
	inc, lifted, want := l.fair.exchanging()
	l.mu.Unlock()
	if len(inc) == 0 && len(lifted) == 0 && len(want) == 0 {
		return
	}
	r := l.r
	ctx, cancel := context.WithTimeout(context.Background(), r.d.cfg.RedisTimeout)
	shared, err := r.d.fair.Exchange(ctx, r.ds.Name, r.d.cfg.Clock, inc, lifted, want)
	cancel()
	if err != nil {
		r.d.log.Debug("shaping: fair share: cannot share service", "downstream", r.ds.Name, "err", err)
	}
	l.mu.Lock()
	l.fair.exchanged(inc, lifted, shared, err, r.d.cfg.Clock.Now())
	l.mu.Unlock()
}
