package replay

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/shaper-io/shaper/internal/plan"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// step is what the admission stage hands the shaping stage: a decision
// (in the order of the arrivals' times), or, with d nil, how far the
// reading has got. held is how many arrivals the reorder window holds.
type step struct {
	d     *Decision
	held  int
	lines int
	bytes int64
}

// admitter is the admission stage: it reads the log, puts it in time
// order and decides each arrival at its time, on its own Redis.
type admitter struct {
	pl      *plan.Plan
	db      *Embedded
	opt     Options
	now     *arrivalClock
	adm     map[string]queue.Admission
	arrived *reorder
}

func newAdmitter(pl *plan.Plan, db *Embedded, opt Options) (*admitter, error) {
	now := &arrivalClock{}
	adm, err := pl.NewAdmissionAt(db.Client(), nil, now)
	if err != nil {
		return nil, err
	}
	return &admitter{pl: pl, db: db, opt: opt, now: now, adm: adm, arrived: newReorder(opt.Reorder)}, nil
}

// batch is how many steps go to the shaping stage at once: handing over
// each alone cost more CPU than it saved.
const batch = 256

// run decides every arrival of rd once the reorder window has passed
// it (the rest at the end) and sends the decisions to out, with a step
// of progress every ProgressEvery lines, in batches.
func (a *admitter) run(ctx context.Context, rd *Reader, out chan<- []step) error {
	lastReport := 0
	b := make([]step, 0, batch)
	flush := func() error {
		if len(b) == 0 {
			return nil
		}
		select {
		case out <- b:
			b = make([]step, 0, batch)
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for end := false; !end; {
		arr, err := rd.Next()
		switch {
		case err == io.EOF:
			end = true
		case err != nil:
			return err
		default:
			if err := a.arrived.add(arr); err != nil {
				return err
			}
		}
		for {
			next, ok := a.arrived.next(end)
			if !ok {
				break
			}
			d, err := a.decide(ctx, next)
			if err != nil {
				return err
			}
			if b = append(b, step{d: d, held: a.arrived.h.Len()}); len(b) == batch {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if !end && rd.Lines()-lastReport >= a.opt.ProgressEvery {
			lastReport = rd.Lines()
			b = append(b, step{held: a.arrived.h.Len(), lines: rd.Lines(), bytes: rd.Bytes()})
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// decide runs one arrival's admission at its time.
func (a *admitter) decide(ctx context.Context, arr Arrival) (*Decision, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	pd, ok := a.pl.Downstream(arr.Downstream)
	if !ok {
		return nil, fmt.Errorf("replay: line %d: unknown downstream %q", arr.Line, arr.Downstream)
	}
	a.now.t = arr.TS
	a.db.Advance(arr.TS)
	return admit(ctx, arr, a.adm[arr.Downstream], pd), nil
}

// shaper is the shaping stage: it gives the admitted and deferred tasks
// their slots in the order they are ready, on its own Redis, and hands
// every decision on in the log's order.
type shaper struct {
	pl      *plan.Plan
	db      *Embedded
	opt     Options
	buckets *shaping.Buckets
	waiting minHeap[*Decision] // admitted and deferred, for their slots
	out     *inOrder
	sums    *summaries
	decided int
	logTime time.Time
	maxHeld int
}

func newShaper(pl *plan.Plan, db *Embedded, opt Options) *shaper {
	s := &shaper{pl: pl, db: db, opt: opt, buckets: shaping.NewBuckets(db.Client(), pl.Prefix),
		waiting: minHeap[*Decision]{less: readyBefore}, sums: newSummaries(pl)}
	s.out = newInOrder(func(d *Decision) error {
		s.sums.add(d)
		if opt.Decisions != nil {
			return opt.Decisions(*d)
		}
		return nil
	})
	return s
}

// run runs the admission stage a on rd in a goroutine and shapes what it
// decides. Before each decision, the tasks ready by its time take their
// slots: the order a single pass over the log in time would give, and
// every script of a stage runs at a time no earlier than the one before.
func (s *shaper) run(ctx context.Context, a *admitter, rd *Reader) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	steps, done := make(chan []step, 1), make(chan error, 1)
	go func() {
		defer close(steps)
		done <- a.run(ctx, rd, steps)
	}()
	err := s.take(ctx, steps)
	if err != nil {
		cancel()
		for range steps { // until the admission stage has stopped
		}
	}
	if aerr := <-done; aerr != nil && (err == nil || err == context.Canceled) {
		err = aerr
	}
	if err != nil {
		return err
	}
	if err := s.shapeUntil(ctx, time.Time{}, true); err != nil {
		return err
	}
	if s.opt.Progress != nil {
		s.opt.Progress(Progress{Lines: rd.Lines(), Bytes: rd.Bytes(), Decided: s.decided, LogTime: s.logTime, Done: true})
	}
	return nil
}

// take shapes the decisions of steps until it is closed.
func (s *shaper) take(ctx context.Context, steps <-chan []step) error {
	for b := range steps {
		if err := s.takeBatch(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

func (s *shaper) takeBatch(ctx context.Context, b []step) error {
	for i, st := range b {
		held := st.held + len(b) - i + s.waiting.Len() + s.out.h.Len()
		s.maxHeld = max(s.maxHeld, held)
		if st.d == nil {
			if s.opt.Progress != nil && st.lines > 0 {
				s.opt.Progress(Progress{Lines: st.lines, Bytes: st.bytes, Decided: s.decided, LogTime: s.logTime, Held: held})
			}
			continue
		}
		d := st.d
		s.decided, s.logTime = s.decided+1, d.TS
		if err := s.shapeUntil(ctx, d.TS, false); err != nil {
			return err
		}
		if d.Outcome == Admitted || d.Outcome == Deferred {
			s.waiting.push(d)
		} else if err := s.out.done(d); err != nil {
			return err
		}
	}
	return nil
}

// shapeUntil gives their slots to the waiting tasks ready at or before
// t (all of them when all is set), in the order they are ready.
func (s *shaper) shapeUntil(ctx context.Context, t time.Time, all bool) error {
	for s.waiting.Len() > 0 && (all || !s.waiting.top().ready.After(t)) {
		if err := ctx.Err(); err != nil {
			return err
		}
		d := s.waiting.pop()
		s.db.Advance(d.ready)
		if err := s.shape(ctx, d); err != nil {
			return err
		}
		if err := s.out.done(d); err != nil {
			return err
		}
	}
	return nil
}
