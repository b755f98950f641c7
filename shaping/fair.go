package shaping

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/control"
	"github.com/shaper-io/shaper/internal/fairindex"
)

// KeyControl is the operator's setting for one admission key of a fair
// downstream (Control.SetKey): its own rate, weight or pause, in every
// process. See control.KeyControl, the type it names.
type KeyControl = control.KeyControl

// MaxFairWeight bounds a fair-share weight.
const MaxFairWeight = fairindex.MaxWeight

// NewFairQueue returns a FairQueue over rdb for key prefix ("" means
// "shaper").
func NewFairQueue(rdb redis.Scripter, prefix string) *FairQueue { return fairindex.New(rdb, prefix) }

// fairFeed is how often a dispatcher feeds while tasks wait: due tasks
// (a key's ceiling, a ProcessAt) join fair order within it.
const fairFeed = 100 * time.Millisecond

// fairIdleFeed is how often a dispatcher looks for parked tasks when none
// waited at its last look (a park needs no feed: the take picks it).
const fairIdleFeed = time.Second

// fairFullFeed is how often a feed also reads what waits (the gauges, the
// wait between feeds) and forgets tags that are over. The calls between
// are tends: an EXISTS and the count of keys waiting, unless tasks wait
// not yet due or held, the only ones a feed moves.
const fairFullFeed = time.Second

// feed moves the downstream's due tasks into fair order while the
// dispatcher runs: every fairFeed while tasks wait, every fairIdleFeed
// when none do.
func (r *runner) feed() {
	var full time.Time // the last feed that read what waits
	waiting := false
	rates := r.d.cfg.Clock.Now() // the last ensureKeyRates (Start made one)
	for {
		now := r.d.cfg.Clock.Now()
		if now.Sub(rates) >= keyRatesEvery {
			r.ensureKeyRates()
			rates = now
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.d.cfg.RedisTimeout)
		var st FairState
		var err error
		if now.Sub(full) < fairFullFeed {
			st, err = r.d.fair.Tend(ctx, r.ds.Name)
		} else {
			st, err = r.d.fair.Feed(ctx, r.ds.Name)
		}
		cancel()
		switch {
		case err != nil:
			r.d.log.Warn("shaping: fair share: cannot feed", "downstream", r.ds.Name, "err", err)
		case st.Parked >= 0: // a feed (a tend that found tasks to move is one)
			full, waiting = now, st.Parked+st.Later > 0
			r.fairSeen(st)
		default: // a tend: the keys waiting (a take may have moved a
			// capped key's tasks to later since the last feed: they are
			// due at its ceiling's pace)
			waiting = waiting || st.Keys > 0
			r.smu.Lock()
			r.fairSt.Keys = st.Keys
			r.smu.Unlock()
		}
		if err == nil && st.Moved > 0 {
			r.wakeTake()
		}
		wait := fairIdleFeed
		if waiting {
			wait = fairFeed
		}
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
