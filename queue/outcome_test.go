package queue

import (
	"context"
	"errors"
	"testing"

	"github.com/shaper-io/shaper/limiters"
)

// Enqueue classifies every result once, in Receipt.Outcome: callers switch
// on it, and the error keeps the detail.
func TestEnqueueOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.producer(t, ProducerConfig{Downstreams: []string{"rej", "def", "free"}, Admission: map[string]Admission{
		"rej": {Limiter: b.limiter(t, "rej", limiters.TokenBucket, limiters.PerHour(1))},
		"def": {Limiter: b.limiter(t, "def", limiters.TokenBucket, limiters.PerHour(1)), OnReject: Defer},
	}})
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	ctx := context.Background()
	steps := []struct {
		ctx     context.Context
		task    Task
		want    Outcome
		wantErr error // nil: no error
	}{
		{ctx, Task{Downstream: "rej", Key: "t"}, Accepted, nil},
		{ctx, Task{Downstream: "rej", Key: "t"}, Rejected, nil},
		{ctx, Task{Downstream: "def", Key: "t"}, Accepted, nil},
		{ctx, Task{Downstream: "def", Key: "t"}, Deferred, nil},
		{ctx, Task{Downstream: "free", UniqueKey: "u"}, Accepted, nil},
		{ctx, Task{Downstream: "free", UniqueKey: "u"}, Duplicate, ErrDuplicate},
		{ctx, Task{Downstream: "web"}, NotEnqueued, ErrUnknownDownstream},
		{ctx, Task{Downstream: "free", Cost: -1}, NotEnqueued, ErrInvalidTask},
		{cancelled, Task{Downstream: "free"}, NotEnqueued, ErrEnqueue},
	}
	for i, s := range steps {
		rec, err := p.Enqueue(s.ctx, s.task)
		if rec.Outcome != s.want {
			t.Errorf("step %d: Outcome = %v, want %v (err %v)", i, rec.Outcome, s.want, err)
		}
		if got := rec.ID != ""; got != s.want.Enqueued() {
			t.Errorf("step %d: ID %q with outcome %v, want an ID exactly when enqueued", i, rec.ID, rec.Outcome)
		}
		switch {
		case s.want == Rejected:
			if !errors.As(err, new(*RejectedError)) || rec.Admission.RetryAfter <= 0 {
				t.Errorf("step %d: err = %v, Retry-After %v; want a *RejectedError and a Retry-After", i, err, rec.Admission.RetryAfter)
			}
		case s.wantErr == nil && err != nil, s.wantErr != nil && !errors.Is(err, s.wantErr):
			t.Errorf("step %d: err = %v, want %v", i, err, s.wantErr)
		}
	}
}

func TestOutcomeString(t *testing.T) {
	t.Parallel()
	for o, want := range map[Outcome]string{NotEnqueued: "not enqueued", Accepted: "accepted", Deferred: "deferred",
		Rejected: "rejected", Duplicate: "duplicate", Outcome(9): "Outcome(9)"} {
		if got := o.String(); got != want {
			t.Errorf("Outcome(%d).String() = %q, want %q", int(o), got, want)
		}
	}
}
