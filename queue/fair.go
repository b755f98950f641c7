package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/shaper-io/shaper/internal/fairindex"
	"github.com/shaper-io/shaper/internal/priority"
	"github.com/shaper-io/shaper/limiters"
)

// FairShare is a fair downstream as its producers see it: its tasks wait
// in weighted fair order of their Key (shaping.Fairness) before its queue.
// The dispatcher's downstream must carry the same Fairness.
type FairShare struct {
	// Fairness holds the weights and per-key ceiling (a
	// *shaping.Fairness); required.
	Fairness *fairindex.Fairness
	// Rate is the downstream's configured rate: it sizes the expected
	// start of a task.
	Rate limiters.Limit
}

// park puts an enqueued fair task in fair order and says when it is
// expected to start. If it cannot, it removes the task again (the enqueue
// failed: not enqueued); should that fail too, the task stays in asynq's
// queue out of fair order, and is served in its queue's order, so it is
// reported enqueued.
func (p *Producer) park(ctx context.Context, fs FairShare, t Task, id string, due time.Time) (start time.Time, err error) {
	now := time.Now()
	var at time.Time // zero: due now, on the Redis clock
	if due.After(now) {
		at = due
	}
	st, err := p.fair.Park(ctx, t.Downstream, fs.Fairness, id, t.Key, t.Cost, at)
	if err != nil {
		derr := p.insp.DeleteTask(p.space.Queue(t.Downstream), id)
		if derr == nil {
			return time.Time{}, fmt.Errorf("%w: fair share: %w", ErrEnqueue, err)
		}
		p.cfg.Logger.Warn("queue: fair share: task enqueued but not in fair order; it is served in its queue's order",
			"downstream", t.Downstream, "id", id, "err", err, "delete_err", derr)
		return due, nil
	}
	if st.Ahead < 0 {
		return due, nil // waits for its due time
	}
	return st.ExpectedStart(now, fs.Rate, t.Cost), nil
}

// lateFair refuses a fair task parked with an expected start past its
// deadline, on a downstream with on_late: reject: it deletes the task from
// asynq (its place in fair order is dropped when its turn comes) and
// returns the *LateError. Should the delete fail, the task stays enqueued
// (the dispatcher archives it if it is late): no error.
func (p *Producer) lateFair(t Task, rec Receipt) error {
	sh, ok := p.cfg.Shaping[t.Downstream]
	if !ok || sh.OnLate != LateReject || t.Deadline.IsZero() || !rec.ExpectedStart.After(t.Deadline) {
		return nil
	}
	if err := p.insp.DeleteTask(p.space.Queue(t.Downstream), rec.ID); err != nil {
		p.cfg.Logger.Warn("queue: fair share: a late task could not be taken back; it is archived if it is late", "downstream", t.Downstream, "id", rec.ID, "err", err)
		return nil
	}
	if p.m != nil {
		p.m.LateRejected.WithLabelValues(t.Downstream).Inc()
	}
	return &LateError{Downstream: t.Downstream, Deadline: t.Deadline, ExpectedStart: rec.ExpectedStart}
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// fairFor is t's downstream's fair share when t waits in fair order: a
// task of a priority other than the default goes by priority alone.
func (p *Producer) fairFor(t Task) (FairShare, bool) {
	fs, ok := p.cfg.Fair[t.Downstream]
	return fs, ok && (t.Priority == 0 || t.Priority == priority.Default)
}
