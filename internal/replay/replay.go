// Package replay answers "what would this config have done with that
// traffic?": it runs a log of past arrivals through a config's admission
// limiters, shaping buckets and quotas, offline, with the real Lua
// scripts at each arrival's own time (the scripts' explicit now), and
// reports what would have been admitted, deferred and rejected, and how
// long the admitted tasks would have waited for their slots. `shaper
// replay` runs it; nothing is enqueued and nothing is sent.
//
// The arrival log is JSON Lines, one arrival a line:
//
//	{"ts": "2026-01-02T15:04:05.120Z", "downstream": "api", "key": "tenant-7", "cost": 1}
//
// ts is RFC 3339 or Unix seconds (a number or a string); downstream may be
// left out when the config has one; key defaults to "" and cost to 1.
// Lines are read as strictly as the enqueue CLI reads tasks (Reader).
//
// The log is streamed: memory holds the arrivals of the reorder window,
// the deferred tasks not yet ready and the decisions waiting for an
// earlier line's, never the whole log. Lines may be out of time order by
// up to Options.Reorder. Admission and shaping run in two goroutines,
// each on an Embedded Redis of its own.
//
// The model is the one shaper runs: admission decides at arrival (a
// rejection under on_reject: defer becomes a task ready at its
// Retry-After, rounded up to a whole second as the producer does); every
// admitted or deferred task then takes the next slot of its downstream's
// bucket at the time it is ready, in that order (FIFO), so its wait is the
// time it would have spent in the queue and the bucket together. A slot
// needs room in each of the downstream's quotas, which start empty at the
// log's first arrival. Limiters in shadow mode are decided and charged
// like the others and reported apart. Runtime overrides (shaper ctl),
// concurrency caps, fairness, priorities and what the downstream answers
// (announced limits, pushbacks, adaptive rates, the breaker) are not
// modelled; a rate schedule is.
package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/shaper-io/shaper/clock"
	"github.com/shaper-io/shaper/internal/plan"
	"github.com/shaper-io/shaper/internal/sizing"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// The outcomes of an arrival.
const (
	Admitted = "admitted"
	Deferred = "deferred"
	Rejected = "rejected"
	Invalid  = "invalid" // a cost no limiter, bucket or quota could ever take
)

// Decision is what became of one arrival.
type Decision struct {
	Line       int       `json:"line"`
	TS         time.Time `json:"ts"`
	Downstream string    `json:"downstream"`
	Key        string    `json:"key,omitempty"`
	Cost       int64     `json:"cost"`
	// Outcome is admitted, deferred, rejected or invalid.
	Outcome string `json:"outcome"`
	// Limiter is the enforced limiter that rejected (or deferred) it.
	Limiter string `json:"limiter,omitempty"`
	// RetryAfterSeconds is that limiter's Retry-After.
	RetryAfterSeconds float64 `json:"retry_after_seconds,omitempty"`
	// ShadowRejected names the limiters in shadow that would have
	// rejected it.
	ShadowRejected []string `json:"shadow_rejected,omitempty"`
	// WaitSeconds is, for an admitted or deferred task, the wait from
	// when it was ready (its arrival, or its Retry-After) to its slot.
	WaitSeconds *float64 `json:"wait_seconds,omitempty"`
	// Start is when its slot starts.
	Start *time.Time `json:"start,omitempty"`
	// HeldBy names the quota that moved its slot later ("quota 5000/1h0m0s"),
	// beyond the bucket's own backlog; "" when none did.
	HeldBy string `json:"held_by,omitempty"`
	// Error says why an arrival is invalid.
	Error string `json:"error,omitempty"`

	ready time.Time
	seq   int
}

// DefaultReorder is Options.Reorder's default.
const DefaultReorder = 10 * time.Second

// DefaultProgressEvery is Options.ProgressEvery's default.
const DefaultProgressEvery = 1000

// Options tune Run. The zero Options replays a log in time order to
// within DefaultReorder, reporting nothing on the way.
type Options struct {
	// Reorder is how far back in time a line may go behind the latest ts
	// before it and still be replayed in its place (logs merged from
	// several hosts); a line further back is an error that names it. It
	// bounds the arrivals held in memory. Zero means DefaultReorder.
	Reorder time.Duration
	// Decisions, when set, is handed every decision in the log's order,
	// as soon as it and every earlier line's are decided.
	Decisions func(Decision) error
	// Progress, when set, is called every ProgressEvery lines read and
	// once at the end (Progress.Done).
	Progress func(Progress)
	// ProgressEvery is how many lines go between Progress calls; zero
	// means DefaultProgressEvery.
	ProgressEvery int
}

// Progress is how far a replay has got.
type Progress struct {
	// Lines and Bytes are what has been read of the log.
	Lines int
	Bytes int64
	// Decided is how many arrivals have been decided, and LogTime the ts
	// of the last one.
	Decided int
	LogTime time.Time
	// Held is how many arrivals and decisions are held in memory.
	Held int
	// Done is set on the last call.
	Done bool
}

// Report is a replay's result.
type Report struct {
	// Arrivals is how many arrivals the log has.
	Arrivals int `json:"arrivals"`
	// Downstreams are the totals per downstream, in the config's order.
	Downstreams []Summary `json:"downstreams"`
	// MaxHeld is the most arrivals and decisions held in memory at once.
	MaxHeld int `json:"-"`
}

// Run replays the log in through pl's admission and shaping and returns
// the totals. Lines that name no downstream go to the config's only one.
// Admission and shaping run in two goroutines, each on an Embedded Redis
// of its own (they share no key, so the split changes no decision).
func Run(ctx context.Context, pl *plan.Plan, in io.Reader, opt Options) (*Report, error) {
	if opt.Reorder <= 0 {
		opt.Reorder = DefaultReorder
	}
	if opt.ProgressEvery <= 0 {
		opt.ProgressEvery = DefaultProgressEvery
	}
	adb, err := NewEmbedded()
	if err != nil {
		return nil, err
	}
	defer adb.Close()
	sdb, err := NewEmbedded()
	if err != nil {
		return nil, err
	}
	defer sdb.Close()
	a, err := newAdmitter(pl, adb, opt)
	if err != nil {
		return nil, err
	}
	def := ""
	if len(pl.Downstreams) == 1 {
		def = pl.Downstreams[0].Shaping.Name
	}
	s := newShaper(pl, sdb, opt)
	if err := s.run(ctx, a, NewReader(in, def)); err != nil {
		return nil, err
	}
	return &Report{Arrivals: s.sums.n, Downstreams: s.sums.list(), MaxHeld: s.maxHeld}, nil
}

// arrivalClock is the time of the arrival being decided: the limiters'
// explicit now. Replay sets no timers; NewTimer is the real clock's.
type arrivalClock struct{ t time.Time }

func (c *arrivalClock) Now() time.Time { return c.t }

func (c *arrivalClock) NewTimer(d time.Duration) clock.Timer { return clock.Real{}.NewTimer(d) }

// admit decides one arrival at its time, as queue.Producer does.
func admit(ctx context.Context, a Arrival, adm queue.Admission, pd *plan.Downstream) *Decision {
	d := &Decision{Line: a.Line, TS: a.TS, Downstream: a.Downstream, Key: a.Key, Cost: a.Cost, Outcome: Admitted,
		ready: a.TS, seq: a.seq}
	if mc := pd.Shaping.MaxCost; mc > 0 && a.Cost > mc {
		d.Outcome, d.Error = Invalid, fmt.Sprintf("cost %d exceeds the max cost %d of downstream %q", a.Cost, mc, a.Downstream)
		return d
	}
	if adm.Limiter == nil {
		return d
	}
	res, err := adm.Limiter.Allow(ctx, a.Key, a.Cost)
	for _, s := range res.Shadow {
		if s.Outcome() == "rejected" {
			d.ShadowRejected = append(d.ShadowRejected, s.Name)
		}
	}
	switch {
	case errors.Is(err, limiters.ErrCostExceedsCapacity):
		d.Outcome, d.Error = Invalid, err.Error()
	case err != nil:
		d.Outcome, d.Error, d.Limiter = Rejected, err.Error(), res.Name // fail_closed on an error of the replay's Redis
	case res.Allowed:
	case adm.OnReject == queue.Defer:
		d.Outcome, d.Limiter, d.RetryAfterSeconds = Deferred, res.Name, res.RetryAfter.Seconds()
		at := a.TS.Add(res.RetryAfter) // whole seconds, rounded up, as the producer schedules it
		if s := at.Truncate(time.Second); !s.Equal(at) {
			at = s.Add(time.Second)
		}
		d.ready = at
	default:
		d.Outcome, d.Limiter, d.RetryAfterSeconds = Rejected, res.Name, res.RetryAfter.Seconds()
	}
	return d
}

// shape reserves d's slot at its ready time, with no bound on the wait
// (the queue in front of the bucket), under the rate of the schedule at
// that time and the downstream's quotas.
func (s *shaper) shape(ctx context.Context, d *Decision) error {
	pd, _ := s.pl.Downstream(d.Downstream)
	rate := pd.Shaping.Rate
	if l, _, ok := pd.Shaping.Schedule.At(d.ready); ok {
		rate = l
	}
	b := shaping.Bucket{Name: d.Downstream, Rate: rate, Burst: pd.Shaping.Burst, MaxCost: pd.Shaping.MaxCost,
		LateTolerance: paceTolerance(pd.Shaping, rate), Quotas: pd.Shaping.Quotas}
	res, err := s.buckets.ReserveAt(ctx, d.ready, b, d.Cost, -1)
	if errors.Is(err, limiters.ErrCostExceedsCapacity) {
		d.Outcome, d.Error = Invalid, err.Error()
		return nil
	}
	if err != nil {
		return fmt.Errorf("replay: line %d: %w", d.Line, err)
	}
	w := res.Wait.Seconds()
	start := d.ready.Add(res.Wait)
	d.WaitSeconds, d.Start, d.HeldBy = &w, &start, res.HeldBy
	return nil
}

// Unmodelled names what a downstream's config sets that a replay does
// not model.
type Unmodelled struct {
	Downstream string
	// Features are the config's names: concurrency, key_concurrency,
	// fairness, priority, adaptive, breaker, batch.
	Features []string
}

// NotModelled lists, in the config's order, the downstreams that set
// something a replay leaves out, and what.
func NotModelled(pl *plan.Plan) []Unmodelled {
	var out []Unmodelled
	for _, pd := range pl.Downstreams {
		ds := pd.Shaping
		var f []string
		for _, c := range []struct {
			set  bool
			name string
		}{{ds.Concurrency > 0, "concurrency"}, {ds.KeyConcurrency > 0, "key_concurrency"}, {ds.Fairness != nil, "fairness"},
			{ds.Priority != nil, "priority"}, {ds.Adaptive != nil, "adaptive"}, {ds.Breaker != nil, "breaker"}, {ds.Batch != nil, "batch"}} {
			if c.set {
				f = append(f, c.name)
			}
		}
		if f != nil {
			out = append(out, Unmodelled{Downstream: ds.Name, Features: f})
		}
	}
	return out
}

// paceTolerance is the late tolerance the dispatcher paces ds's bucket
// with (its spacing slack), as the runner computes it.
func paceTolerance(ds shaping.Downstream, rate limiters.Limit) time.Duration {
	if ds.LateTolerance != 0 {
		return max(ds.LateTolerance, 0)
	}
	return sizing.LateTolerance(rate, 1)
}
