package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/limiters"
)

// ErrLate: the task's predicted start is past its deadline and its
// downstream refuses such tasks (Shaping.OnLate LateReject). The error is a
// *LateError (Outcome Late); nothing was enqueued and an admission charge
// was given back.
var ErrLate = errors.New("queue: task would start after its deadline")

// OnLate is what a downstream does with a task that cannot start before
// its deadline.
type OnLate int

const (
	// LateArchive enqueues it anyway: if its deadline passes while it
	// waits, the dispatcher archives it unsent ("deadline passed").
	LateArchive OnLate = iota
	// LateReject refuses it at enqueue when its predicted start
	// (Receipt.ExpectedStart) is past its deadline (Outcome Late), and
	// archives it like LateArchive if it is late all the same.
	LateReject
)

// Shaping is what a Producer knows of a downstream's shaping: enough to
// predict when a task will start (Receipt.ExpectedStart).
type Shaping struct {
	// Rate is the downstream's configured release rate; a runtime
	// override (and a slower adaptive rate) read from Redis replaces it,
	// as in the dispatcher. A rate schedule is not followed.
	Rate limiters.Limit
	// MaxWait is the downstream's max_wait: how far ahead a batch's
	// bucket reserves (zero: 1s, the dispatcher's default).
	MaxWait time.Duration
	// Batch: asynq's server serves the downstream (batch), and its
	// workers keep the bucket up to MaxWait ahead under a backlog. Other
	// downstreams reserve at the take, only within its look-ahead.
	Batch bool
	// OnLate: LateArchive (the zero value) or LateReject.
	OnLate OnLate
	// HoldTimeout, when positive, is the attempt timeout of the
	// downstream's tasks that set no Timeout. asynq's default (30 min)
	// bounds the wait for a slot too, and a task whose attempt runs out
	// while a spent quota or an announced limit holds the downstream is
	// counted a failed attempt: downstreams that may hold that long (a
	// daily quota) need more. The handler's own call needs its own bound
	// (the http handler's timeout).
	HoldTimeout time.Duration
}

// LateError is returned for a task refused because it would start after
// its deadline.
type LateError struct {
	Downstream string
	// Deadline is the task's deadline (Task.Deadline, or now + TTL).
	Deadline time.Time
	// ExpectedStart is when it would have started.
	ExpectedStart time.Time
}

// Error names the downstream, the deadline and the predicted start.
func (e *LateError) Error() string {
	return fmt.Sprintf("queue: task for %q refused: predicted start %s is %s past its deadline %s (on_late: reject)",
		e.Downstream, e.ExpectedStart.UTC().Format(time.RFC3339Nano), e.ExpectedStart.Sub(e.Deadline).Round(time.Millisecond),
		e.Deadline.UTC().Format(time.RFC3339Nano))
}

// Unwrap makes errors.Is(err, ErrLate) hold.
func (e *LateError) Unwrap() error { return ErrLate }

// deadline is t's deadline: Deadline, or now + TTL; zero when it has none.
func (t Task) deadline(now time.Time) time.Time {
	if t.TTL > 0 {
		return now.Add(t.TTL)
	}
	return t.Deadline
}

// checkDeadline refuses a task that sets both Deadline and TTL, or a
// negative TTL.
func checkDeadline(t Task) error {
	switch {
	case t.TTL < 0:
		return fmt.Errorf("%w: ttl must not be negative, got %s", ErrInvalidTask, t.TTL)
	case t.TTL > 0 && !t.Deadline.IsZero():
		return fmt.Errorf("%w: set deadline or ttl, not both", ErrInvalidTask)
	}
	return nil
}

// predict sets rec.ExpectedStart for t when it has a deadline or the
// producer predicts every task (ProducerConfig.Predict), and refuses t
// with a *LateError when its downstream rejects late tasks and it would
// be late. t.Deadline is the resolved deadline. Prediction errors (Redis)
// leave ExpectedStart zero and refuse nothing: the dispatcher still
// archives a task that turns out late.
func (p *Producer) predict(ctx context.Context, t Task, rec *Receipt) error {
	sh, ok := p.cfg.Shaping[t.Downstream]
	if _, fair := p.cfg.Fair[t.Downstream]; fair || !ok || (t.Deadline.IsZero() && !p.cfg.Predict) {
		return nil // a fair downstream's start comes from its place in fair order (park)
	}
	start, err := p.expectedStart(ctx, t, sh)
	if err != nil {
		p.cfg.Logger.Debug("queue: cannot predict the start", "downstream", t.Downstream, "err", err)
		return nil
	}
	rec.ExpectedStart = start
	if sh.OnLate == LateReject && !t.Deadline.IsZero() && start.After(t.Deadline) {
		if p.m != nil {
			p.m.LateRejected.WithLabelValues(t.Downstream).Inc()
		}
		return &LateError{Downstream: t.Downstream, Deadline: t.Deadline, ExpectedStart: start}
	}
	return nil
}

// expectedStart predicts when t, enqueued now, starts on a FIFO
// downstream: once the slots already reserved in its bucket have gone
// (next_free, which Peek reads) and then every task pending ahead of it,
// one slot of a unit each at the rate in force; never before t.ProcessAt.
// Tasks whose slots a worker wastes (late skips) and calls of other costs
// make it early; a paused downstream makes it meaningless.
// Three commands: the bucket's peek, the pending and active lists' lengths. It
// assumes the default worker budget (enough to fill the bucket) and fast
// calls; late skips (slots wasted by starved workers) make tasks start
// later than predicted.
func (p *Producer) expectedStart(ctx context.Context, t Task, sh Shaping) (time.Time, error) {
	rate := p.rateInForce(t.Downstream, sh.Rate)
	wait, err := p.buckets.Peek(ctx, t.Downstream, rate, max(t.Cost, 1))
	if err != nil {
		return time.Time{}, err
	}
	q := p.space.Asynq(t.Downstream)
	var pendingCmd, activeCmd *redis.IntCmd
	if _, err := p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		pendingCmd, activeCmd = pl.LLen(ctx, q.Pending()), pl.LLen(ctx, q.Active())
		return nil
	}); err != nil {
		return time.Time{}, fmt.Errorf("queue: pending of %q: %w", t.Downstream, err)
	}
	pending, active := pendingCmd.Val(), activeCmd.Val()
	iv, maxWait := rate.Interval(1), cmp.Or(sh.MaxWait, time.Second)
	ahead := time.Duration(pending)
	if sh.Batch {
		// Tasks taken wait for slots the lane may not have reserved yet:
		// each but one call in flight needs a slot ahead.
		wait = max(wait, time.Duration(active-1)*iv)
		if wait > 0 && wait >= maxWait-2*iv {
			// A backlog being served: the lane keeps the bucket full
			// (next_free max_wait ahead; between two of its calls, an
			// interval or two apart, it dips by that much) and the
			// workers hold one task more that waits for room.
			wait, ahead = max(wait, maxWait), ahead+1
		}
	}
	start := time.Now().Add(wait + ahead*iv)
	if t.ProcessAt.After(start) {
		start = t.ProcessAt
	}
	return start, nil
}

// rateInForce is ds's rate: configured, replaced by a runtime override,
// capped by the adaptive rate, as the producer last read them.
func (p *Producer) rateInForce(ds string, configured limiters.Limit) limiters.Limit {
	st := p.follow.stateOf(ds)
	rate := configured
	if !st.Override.IsZero() {
		rate = st.Override
	}
	if st.Adaptive > 0 && st.Adaptive < rate.PerSec() {
		rate = limiters.Limit{Rate: max(int64(st.Adaptive*1000+0.5), 1), Period: 1000 * time.Second, Burst: 1}
	}
	return rate
}
