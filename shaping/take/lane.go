package take

import (
	"cmp"
	"sync/atomic"
	"time"

	"github.com/shaper-io/shaper/internal/fairindex"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/priority"
)

// laneState is what a lane's next check is.
type laneState int

const (
	busy   laneState = iota // take at next: the queue had work
	idle                    // probe (LLEN) at next: the queue was empty
	paused                  // take at next: the queue was paused
)

// lane is one downstream as the loop sees it. Only the loop goroutine reads
// or writes a lane's fields (jobs and ops post their results to it).
type lane struct {
	d      Downstream
	q      keys.AsynqQueue
	args   lua.TakeArgs // the take's arguments but Slots, Maintain
	slots  int          // the most tasks one take asks for
	minGap time.Duration
	lead   time.Duration // a take is due when the next slot starts within it
	levels []string      // the priority lists (Downstream.Priority), or none
	probe  []string      // the lists an idle check looks at: pending and levels

	state        laneState
	stuck        bool          // the last take found nothing it could take (full or empty): Engine.Freed wakes it
	next         time.Time     // when the lane's next take or probe is due
	gap          time.Duration // the idle probe's current backoff
	errGap       time.Duration // the backoff after a failed call
	lost         time.Duration // the backoff after takes that found the slots taken
	early        int           // takes in a row that found the slots taken
	pending      bool          // a take or probe of the lane is in flight
	lastMaintain time.Time
	nextExtend   time.Time
	extending    bool
	held         map[string]*job // tasks this process took and has not finished
	// unstarted counts jobs taken whose handler has not been entered
	// yet: Want does not see them, so a take subtracts them
	unstarted atomic.Int64
}

// slotsFor is the most tasks one take asks for at interval iv.
func slotsFor(ahead, iv int64) int {
	if iv > 0 {
		return min(int(ahead/iv)+1, 1000)
	}
	return 1000
}

func newLane(cfg Config, d Downstream) *lane {
	iv := d.interval()
	la := cmp.Or(d.LookAhead, cfg.LookAhead)
	ahead := la.Microseconds()
	slots := slotsFor(ahead, iv)
	// A lane that just emptied is checked again after about one slot
	// (never more often than every 10ms), backing off to IdlePoll.
	minGap := min(max(time.Duration(iv)*time.Microsecond, 10*time.Millisecond), cfg.IdlePoll)
	q := cfg.Keys.Asynq(d.Name)
	var levels []string
	var weights priority.Weights
	turns := ""
	if d.Priority {
		for _, p := range priority.Levels {
			levels = append(levels, cfg.Keys.TakePriority(d.Name, p))
		}
		if !d.Weights.Strict() {
			weights, turns = d.Weights, cfg.Keys.TakeTurns(d.Name)
		}
	}
	l := &lane{d: d, q: q, slots: slots, minGap: minGap, lead: max(cmp.Or(d.Lead, la/3), 5*time.Millisecond), held: map[string]*job{},
		levels: levels, probe: append([]string{q.Pending()}, levels...),
		args: lua.TakeArgs{Bucket: cfg.Keys.Bucket(d.Name), Queue: q, Interval: iv,
			Burst: int64(d.Burst-1) * iv, LookAhead: ahead, Budget: int64(d.InFlight), Lease: cfg.Lease,
			Maintained: cfg.Keys.TakeMaintained(d.Name), MaintainEvery: cfg.Maintain, Levels: levels,
			Weights: weights, Turns: turns}}
	if d.Fair {
		f := cfg.Keys.Fair(d.Name)
		l.args.Fair, l.args.FairTTL = &f, fairindex.KeyTTL
		l.probe = append(l.probe, f.Parked) // a ZSET exists while it holds a task
	}
	return l
}

// free is how many more tasks this process may take for the lane.
func (l *lane) free() int { return l.d.InFlight - len(l.held) }

// batch is the least room worth a take: a budget smaller than the
// look-ahead's slots is refilled in batches of a quarter of it, not one
// take per finish.
func (l *lane) batch() int {
	if len(l.held) == 0 {
		return 1
	}
	return max(1, min(l.slots, l.d.InFlight)/4)
}

// toIdle makes the lane probe from at on, backing off from minGap to poll.
func (l *lane) toIdle(at time.Time, poll time.Duration) {
	if l.state != idle {
		l.gap = l.minGap
	} else {
		l.gap = min(2*l.gap, poll)
	}
	l.state = idle
	l.next = at.Add(l.gap)
}

// wake makes the lane take at once.
func (l *lane) wake(now time.Time) {
	l.state = busy
	l.next = now
}

// failed backs the lane off after a failed Redis call (fail closed: nothing
// is released without a reservation).
func (l *lane) failed(now time.Time, poll time.Duration) {
	l.errGap = min(max(2*l.errGap, 50*time.Millisecond), poll)
	l.next = now.Add(l.errGap)
}

// applyTake sets the lane's next check from take.lua's reply r, received
// at local time at. It returns the local time of Redis time us.
//
// A take is due when the next slot starts within lead, so each one serves
// the slots from there to the look-ahead. When several processes serve a
// downstream, the one that took last calls first; a take that finds the
// slots taken (early) backs off, doubling to IdlePoll/2, so that losers
// cost a few calls per second instead of one per batch, and still step in
// within that when the taker stops.
func (l *lane) applyTake(r lua.TakeReply, at time.Time, poll time.Duration) func(us int64) time.Time {
	local := func(us int64) time.Time { return at.Add(time.Duration(us-r.Now) * time.Microsecond) }
	l.errGap = 0
	due := local(r.Next).Add(-l.lead)
	l.stuck = r.Status == lua.TakeFull || r.Status == lua.TakeEmpty
	switch r.Status {
	case lua.TakeTaken:
		l.state, l.next, l.lost, l.early = busy, due, 0, 0
		if r.Drained {
			l.toIdle(at, poll)
			l.next = later(l.next, due)
		}
	case lua.TakeEarly:
		// the first after a take of its own asks at the lead again: its
		// own lane's reservations may have moved the slots on (a task of
		// more units); the others back off
		if l.early++; l.early > 1 {
			l.lost = min(max(2*l.lost, l.lead), poll/2)
		}
		l.state, l.next = busy, due.Add(l.lost)
	case lua.TakeEmpty:
		l.toIdle(at, poll)
	case lua.TakePaused:
		l.state, l.next = paused, at.Add(poll)
	case lua.TakeFull:
		// Other processes hold the budget (this one's finishes wake the
		// lane through free): check again after a slot or two.
		l.state, l.next = busy, at.Add(min(max(2*l.minGap, 50*time.Millisecond), poll))
	}
	return local
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
