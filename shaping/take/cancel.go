package take

import (
	"context"
	"errors"
	"time"

	"github.com/shaper-io/shaper/internal/asynqmsg"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
)

// ErrCancelled is the cause of a call's context when the task was
// cancelled (Engine.Cancel, or asynq.Inspector.CancelProcessing from any
// process): the handler should stop, and the task is removed whatever the
// handler returns but nil.
var ErrCancelled = errors.New("take: task cancelled")

// Cancel cancels task id if this process holds it: one waiting for its
// slot is removed without a call; one in its call has its context
// cancelled (cause ErrCancelled), and is removed unless the handler still
// returns nil. It reports whether the task was held here. asynq's
// cancellation channel reaches every engine, so CancelProcessing from
// anywhere does the same.
func (e *Engine) Cancel(id string) bool {
	v, ok := e.held.Load(id)
	if ok {
		v.(*job).cut(ErrCancelled)
	}
	return ok
}

// listenCancels follows asynq's cancellation channel until ctx ends,
// closing subscribed once Redis confirmed the subscription. The
// subscription reconnects by itself after a Redis outage.
func (e *Engine) listenCancels(ctx context.Context, subscribed chan<- struct{}) {
	ps := e.cfg.Redis.Subscribe(ctx, keys.AsynqCancelChannel)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err == nil {
		close(subscribed)
	}
	ch := ps.Channel()
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				return
			}
			e.Cancel(m.Payload)
		case <-ctx.Done():
			return
		}
	}
}

// cancelled reports whether the job's task was cancelled.
func (j *job) cancelled() bool { return context.Cause(j.cutCtx) == ErrCancelled }

// remove finishes a cancelled task: deleted as asynq does a revoked one
// (its unique lock released), with no retry.
func (j *job) remove(m *asynqmsg.Message, inCall bool) {
	a := lua.TakeDoneArgs{Queue: j.l.q, ID: j.tt.ID, Day: time.Now(), UniqueKey: m.UniqueKey}
	j.e.cfg.Logger.Info("take: task cancelled", "downstream", j.l.d.Name, "task", j.tt.ID, "handler_called", inCall)
	j.settle("cancel", &j.e.stats.cancelled, func(ctx context.Context) (bool, error) { return j.e.store.TakeDone(ctx, a) })
}
