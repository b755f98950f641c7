package shaping

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

	"github.com/shaper-io/shaper/internal/fairindex"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/sizing"
	"github.com/shaper-io/shaper/limiters"
)

// runner serves one downstream.
type runner struct {
	d        *services
	ds       Downstream
	handlers map[string]HandlerFunc
	srv      *asynq.Server
	rate     atomic.Pointer[limiters.Limit]

	pause pauseSwitch
	gates gateChain // the take's gates (gates.go)

	releasing atomic.Int64
	held      atomic.Int64
	applied   applied // what the control loop last put in force (controller.go)
	// offset estimates local time minus the Redis clock of this
	// downstream's bucket (on a cluster, each master has its own clock).
	offset clockOffset
	lane   *lane
	leases *leaseLane // nil without a concurrency cap
	brk    *breaker   // nil without a circuit breaker

	smu    sync.Mutex
	st     State     // runtime state as last read from Redis
	fairSt FairState // what the last feed saw (fair downstreams)
	fstats fairStats // releases per key, last minute (fair downstreams)

	limits limitState // quotas and announced limit as last seen
	clamp  clampState // the last answer cut to max_hold or a cost cap
	push   pushbacks  // the holds the downstream announced

	woken broadcast // fired by wake
}

// wakeCh returns a channel closed at the next wake: a lane sleeping until
// a reply's wait (a bucket pushed a day ahead) selects on it, so that a
// control change (reset, rate, resume) takes effect at once.
func (r *runner) wakeCh() <-chan struct{} { return r.woken.wait() }

// wake ends every sleep on wakeCh, and has the engine ask r's take gate
// again.
func (r *runner) wake() {
	r.wakeTake()
	r.woken.fire()
}

// wakeTake has the engine look at r's queue now (new work, or a gate
// that may have opened).
func (r *runner) wakeTake() {
	if r.srv == nil && r.d.eng != nil {
		r.d.eng.Wake(r.ds.Name)
	}
}

// freedTake tells the engine that a place among r's calls in flight was
// freed (take.Engine.Freed).
func (r *runner) freedTake() {
	if r.srv == nil && r.d.eng != nil {
		r.d.eng.Freed(r.ds.Name)
	}
}

func (r *runner) bucket() Bucket {
	return Bucket{Name: r.ds.Name, Rate: *r.rate.Load(), Burst: r.ds.Burst, MaxCost: r.ds.maxReleaseCost(),
		LateTolerance: r.paceTolerance(), Quotas: r.ds.Quotas}
}

// sleep waits d, or less if ctx ends or the dispatcher stops (false).
func (r *runner) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		select {
		case <-ctx.Done():
			return false
		case <-r.d.stopping:
			return false
		default:
			return true
		}
	}
	t := r.d.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	case <-r.d.stopping:
		return false
	}
}

// acquire waits in the lane for a slot, then until the slot. It fails
// only when ctx ends, the dispatcher stops, or the cost can never fit
// (ErrCostExceedsCapacity); Redis errors are retried by the lane (shaping
// fails closed: nothing is released without a reservation). The token
// says what breaker state the release goes out in.
func (r *runner) acquire(ctx context.Context, cost int64, key string, front bool) (Reservation, brkToken, error) {
	for {
		g, err := r.grantOf(ctx, cost, key, front)
		if err != nil {
			return Reservation{}, brkToken{}, err
		}
		deadline := g.slot.Add(r.offset.get()) // the slot on the local clock
		if !r.sleep(ctx, deadline.Sub(r.d.cfg.Clock.Now())) {
			return Reservation{}, brkToken{}, errStopping // the slot is wasted, never replayed
		}
		var tok brkToken
		if r.brk != nil {
			var ok bool
			if tok, ok = r.brk.claim(g.seq); !ok {
				// the breaker opened (or moved) while the slot came: the
				// slot is wasted, and the task waits for the breaker
				r.wasted(cost, g)
				front = true
				continue
			}
		}
		return Reservation{OK: true, Count: 1, Now: g.now, Wait: g.slot.Sub(g.now), issued: g.issued - cost, cost: cost,
			due: deadline}, tok, nil
	}
}

// grantOf is the task's next slot: the first time, the one its take
// reserved. A task whose slot was wasted since (a late wake-up, a
// breaker that opened, a refused call) or whose gate shut goes back to
// the queue, first in line, and a take reserves its next slot
// (errGiveBack: no attempt consumed). A task taken without a slot (more
// units than the take reserves for one task), or whose headers say
// another cost than the take read, waits in the lane, which reserves its
// units or refuses what no wait makes fit.
func (r *runner) grantOf(ctx context.Context, cost int64, key string, front bool) (grant, error) {
	ts := takenOf(ctx).slot
	if ts == nil {
		return r.lane.wait(ctx, cost, key, front)
	}
	if ts.used {
		return grant{}, errGiveBack
	}
	ts.used = true
	units := max(ts.res.Units, 1)
	g := grant{slot: time.UnixMicro(ts.res.Slot), now: time.UnixMicro(ts.res.Now), issued: ts.res.Issued}
	p := r.releaseGate()
	if !p.ok {
		// paused, or the breaker opened: the units go back to the
		// quotas, and the task to the queue, where the take's gates hold it
		r.wasted(units, g)
		return grant{}, errGiveBack
	}
	if cost != units {
		// the take read other units in the task's msg than its headers
		// say: they go back to the quotas (their slot of the rate is
		// lost), and the lane reserves all the task's units
		r.wasted(units, g)
		return r.lane.wait(ctx, cost, key, front)
	}
	g.seq = p.seq
	inLine(ctx) // its slot is decided: the next task of its take may go
	return g, nil
}

// skipLate reports whether a release reserved as res woke too far behind
// its slot to go out now (late by more than the late tolerance, on the
// local clock). A worker that wakes late (CPU starvation, a GC, a slow
// Redis reply) would release next to the following slots and bunch them:
// its slot is wasted instead (counted as a late skip) and the task queues
// again at the front, so every release starts within the tolerance of its
// slot. Checked just before the handler is called, after everything else
// the release waits on.
func (r *runner) skipLate(res Reservation) bool {
	if res.due.IsZero() || r.d.cfg.Clock.Now().Sub(res.due) <= r.lateTolerance(res.cost) {
		return false
	}
	if m := r.d.m; m != nil {
		m.LateSkips.WithLabelValues(r.ds.Name).Inc()
	}
	r.wasted(res.cost, grant{slot: res.Slot(), issued: res.seqN(0)})
	return true
}

// observeWaits records the wait of each slot a lane call reserved.
func (r *runner) observeWaits(res Reservation) {
	m := r.d.m
	if m == nil {
		return
	}
	h := m.SlotWait.WithLabelValues(r.ds.Name)
	for j := range res.Count {
		h.Observe(res.SlotN(j).Sub(res.Now).Seconds())
	}
}

// paceTolerance is the lateness the bucket's spacing pays for (see
// Bucket.LateTolerance): the configured LateTolerance, or the default for
// a unit of cost; none when late releases are never skipped.
func (r *runner) paceTolerance() time.Duration {
	if r.ds.LateTolerance != 0 {
		return max(r.ds.LateTolerance, 0)
	}
	return sizing.LateTolerance(*r.rate.Load(), 1)
}

// lateTolerance is how far behind its slot a release of cost units may
// start: the configured LateTolerance, or half the slot it occupies at
// the rate now, at least 5ms (sizing.LateTolerance says why).
func (r *runner) lateTolerance(cost int64) time.Duration {
	if r.ds.LateTolerance < 0 {
		return time.Duration(1<<63 - 1)
	}
	if r.ds.LateTolerance > 0 {
		return r.ds.LateTolerance
	}
	return sizing.LateTolerance(*r.rate.Load(), cost)
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

func (r *runner) outcome(o string) {
	if r.d.m != nil {
		r.d.m.Outcomes.WithLabelValues(r.ds.Name, o).Inc()
	}
}

// wasted gives back to the quotas and the announced limit the units of
// slots that were reserved but never released (a late worker, a stocked
// slot past its time): the downstream never saw them. The bucket keeps
// them (a wasted slot is never replayed). Without quotas it does nothing;
// with them, one script call per slot, off the caller's path.
func (r *runner) wasted(cost int64, gs ...grant) {
	if len(gs) == 0 || len(r.ds.Quotas) == 0 {
		return
	}
	go func() {
		defer r.wake() // the units are back: a take may find room now
		for _, g := range gs {
			if !r.unquota(cost, g) {
				return
			}
		}
	}()
}

// unquota gives the units of g's slot back to the quotas and the announced
// limit (not to the rate: the slot's time is gone either way); false when
// Redis failed.
func (r *runner) unquota(cost int64, g grant) bool {
	b := r.bucket()
	bs := r.d.buckets
	ctx, cancel := context.WithTimeout(context.Background(), r.d.cfg.RedisTimeout)
	defer cancel()
	start := time.Now()
	_, err := bs.store.Settle(ctx, bs.space.Bucket(b.Name), lua.SettleArgs{Answers: bs.answerKeys(b.Name),
		Diff: -cost, Slot: g.slot.UnixMicro(), Seq: g.issued, Guard: b.quotaGuard(cost), Quotas: bs.quotaArgs(b)})
	r.d.m.ObserveScript("answer", time.Since(start), err)
	if err != nil {
		r.d.log.Warn("shaping: cannot give a slot's units back to the quotas", "downstream", r.ds.Name, "err", err)
		return false
	}
	return true
}

// observeReservation records a lane reservation's quota state and what
// held it.
func (r *runner) observeReservation(res Reservation) {
	r.limits.reserved(res)
	m := r.d.m
	if m == nil {
		return
	}
	for _, q := range res.Quotas {
		l := q.Quota.String()
		m.Limits.QuotaUsed.WithLabelValues(r.ds.Name, l).Set(float64(q.Used))
		m.Limits.QuotaLimit.WithLabelValues(r.ds.Name, l).Set(float64(q.Quota.Limit))
		reset := 0.0
		if !q.Reset.IsZero() {
			reset = float64(q.Reset.UnixMicro()) / 1e6
		}
		m.Limits.QuotaReset.WithLabelValues(r.ds.Name, l).Set(reset)
	}
	if res.HeldBy != "" && res.HeldBy != "announced pace" {
		m.Limits.Holds.WithLabelValues(r.ds.Name, res.HeldBy).Inc()
	}
	m.Limits.AnnouncedPace.WithLabelValues(r.ds.Name).Set(res.pace())
}

// limitState holds a runner's Limits.
type limitState struct {
	mu sync.Mutex
	l  Limits
}

func (s *limitState) reserved(res Reservation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.l.Quotas, s.l.HeldBy, s.l.Pace = res.Quotas, res.HeldBy, res.pace()
}

func (s *limitState) announced(a lua.Announcement, left int64, effect, header string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.l.Announced = Announced{Source: a.Source, Remaining: a.Remaining, Limit: a.Limit, Left: left,
		Reset: time.UnixMicro(a.Until), Effect: effect, Header: header}
}

// clampState is a runner's last Clamp and its log throttle.
type clampState struct {
	mu     sync.Mutex
	last   Clamp
	logged map[string]time.Time
}

// Shaping modes a runner has seen: unknown until its first control
// refresh, so the mode it starts in never counts as a change.
const (
	modeUnknown int32 = iota
	modeEnforce
	modeShadow
)

// expire archives t when its deadline has passed (nil when it has not):
// checked when the task is taken, and again just before its handler runs.
func (r *runner) expire(t *Task) error {
	if !pastDeadline(t.Deadline, r.d.cfg.Clock.Now()) {
		return nil
	}
	return r.lateArchive(t)
}

// lateArchive counts t as late and returns the error that archives it.
func (r *runner) lateArchive(t *Task) error {
	r.outcome("deadline_passed")
	if m := r.d.m; m != nil {
		m.DeadlinePassed.WithLabelValues(r.ds.Name).Inc()
	}
	return late(t.Deadline, r.d.cfg.Clock.Now())
}
