package take

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

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

// listen follows asynq's cancellation channel and Config.Follow's
// channels until ctx ends, closing subscribed once Redis confirmed the
// subscriptions. The subscription reconnects by itself after a Redis
// outage.
func (e *Engine) listen(ctx context.Context, subscribed chan<- struct{}) {
	chans := []string{keys.AsynqCancelChannel}
	for c := range e.cfg.Follow {
		chans = append(chans, c)
	}
	ps := e.cfg.Redis.Subscribe(ctx, chans...)
	defer ps.Close()
	deliver := func(m *redis.Message) {
		if f := e.cfg.Follow[m.Channel]; f != nil {
			f(m.Payload)
		} else if m.Channel == keys.AsynqCancelChannel {
			e.Cancel(m.Payload)
		}
	}
	// one confirmation per channel; a message may come between them
	for confirmed := 0; confirmed < len(chans); {
		v, err := ps.Receive(ctx)
		if err != nil {
			break
		}
		switch v := v.(type) {
		case *redis.Subscription:
			if confirmed++; confirmed == len(chans) {
				close(subscribed)
			}
		case *redis.Message:
			deliver(v)
		}
	}
	ch := ps.Channel()
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				return
			}
			deliver(m)
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
	if h := j.e.cfg.Hooks.Cancelled; h != nil && !inCall {
		h(j.l.d.Name)
	}
	j.settle("cancel", &j.e.stats.cancelled, func(ctx context.Context) (bool, error) { return j.e.store.TakeDone(ctx, a) })
}
