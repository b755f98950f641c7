package take

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hibiken/asynq"
)

// TestTakeEngineCancel: asynq's Inspector.CancelProcessing (from any
// process: it publishes on asynq's channel) cuts a call in progress, whose
// context ends with ErrCancelled, and the task is removed, not retried; a
// task taken and waiting for its slot is removed without a call; the
// others are delivered.
func TestTakeEngineCancel(t *testing.T) {
	r := newRig(t)
	ids := r.enqueue("d", "job", 3, asynq.MaxRetry(5))
	inCall := make(chan string, 3)
	cause := make(chan error, 1)
	called := map[string]bool{}
	calls := make(chan string, 3)
	d := Downstream{Name: "d", Rate: 2, InFlight: 3, Handler: func(ctx context.Context, t *Task) error {
		calls <- t.ID
		if t.ID != ids[0] {
			return nil
		}
		inCall <- t.ID
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	}}
	// a look-ahead of 2s at 2/s takes all three: two wait for their slots
	e := r.engine(nil, Config{LookAhead: 2 * time.Second}, d)
	start(t, e)
	<-inCall
	waitFor(t, 2*time.Second, "three taken", func() bool { return r.queueInfo("d").Active == 3 })
	if !e.Cancel(ids[2]) {
		t.Fatalf("Cancel(%s) = false, want true: the engine holds it", ids[2])
	}
	if err := r.insp.CancelProcessing(ids[0]); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-cause:
		if !errors.Is(c, ErrCancelled) {
			t.Errorf("the call's context ended with cause %v, want ErrCancelled", c)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the call in progress was not cut within 5s of CancelProcessing")
	}
	waitFor(t, 5*time.Second, "the queue empty", func() bool {
		qi := r.queueInfo("d")
		return qi.Active+qi.Pending+qi.Retry+qi.Archived == 0 && qi.Size == 0
	})
	close(calls)
	for id := range calls {
		called[id] = true
	}
	if called[ids[2]] || !called[ids[0]] || !called[ids[1]] {
		t.Errorf("calls %v: want %s and %s called, %s (cancelled while waiting) never", called, ids[0], ids[1], ids[2])
	}
	for _, id := range []string{ids[0], ids[2]} {
		if _, err := r.insp.GetTaskInfo(r.sp.Queue("d"), id); !errors.Is(err, asynq.ErrTaskNotFound) {
			t.Errorf("cancelled task %s: GetTaskInfo err %v, want ErrTaskNotFound (removed)", id, err)
		}
	}
	if s := e.Stats(); s.Cancelled != 2 || s.Done != 1 || s.Retried != 0 {
		t.Errorf("stats %+v: want 2 cancelled, 1 done, 0 retried", s)
	}
	if e.Cancel(ids[1]) {
		t.Error("Cancel of a finished task = true, want false")
	}
}
