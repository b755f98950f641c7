package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
)

// Backlog counts a downstream's tasks by state.
type Backlog struct {
	// Downstream is the downstream counted.
	Downstream string
	Pending    int // waiting to be taken
	Active     int // held by a worker (waiting for a slot or being delivered)
	Scheduled  int // deferred or scheduled for later
	Retry      int // waiting to be retried after a handler failure
	Archived   int // failed for good, with their errors
	Completed  int // kept after success (when a retention is set)
	Processed  int // delivered today
	Failed     int // failed attempts today
}

// Total is every task not yet done: pending, active, scheduled and retry.
func (b Backlog) Total() int { return b.Pending + b.Active + b.Scheduled + b.Retry }

// Inspector reads backlogs. Safe for concurrent use.
// The zero Inspector is not usable: NewInspector builds one.
type Inspector struct {
	in      *asynq.Inspector
	rdb     redis.UniversalClient
	scripts *lua.Store // priority lists
	space   keys.Space
}

// NewInspector returns an Inspector over rdb for keys under prefix.
func NewInspector(rdb redis.UniversalClient, prefix string) *Inspector {
	return &Inspector{in: asynq.NewInspectorFromRedisClient(rdb), rdb: rdb, scripts: lua.New(rdb), space: keys.New(prefix)}
}

// Counts is Backlog's five counts (pending, active, scheduled, retry,
// archived) in one pipelined round trip of five O(1) commands, for
// samplers that run every few seconds in every process (asynq's
// GetQueueInfo, behind Backlog, runs a dozen commands and samples memory).
func (i *Inspector) Counts(ctx context.Context, downstream string) (Backlog, error) {
	q := i.space.Asynq(downstream)
	var cmds [5]*redis.IntCmd
	_, err := i.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmds[0] = p.LLen(ctx, q.Pending())
		cmds[1] = p.LLen(ctx, q.Active())
		cmds[2] = p.ZCard(ctx, q.Scheduled())
		cmds[3] = p.ZCard(ctx, q.Retry())
		cmds[4] = p.ZCard(ctx, q.Archived())
		return nil
	})
	if err != nil {
		return Backlog{}, fmt.Errorf("queue: backlog of %q: %w", downstream, err)
	}
	return Backlog{Downstream: downstream, Pending: int(cmds[0].Val()), Active: int(cmds[1].Val()),
		Scheduled: int(cmds[2].Val()), Retry: int(cmds[3].Val()), Archived: int(cmds[4].Val())}, nil
}

// Backlog reports a downstream's queue. A queue that does not exist yet
// (nothing ever enqueued) is an empty backlog, not an error.
func (i *Inspector) Backlog(downstream string) (Backlog, error) {
	q, err := i.in.GetQueueInfo(i.space.Queue(downstream))
	if err != nil && !i.exists(i.space.Queue(downstream)) {
		// asynq's GetQueueInfo does not wrap ErrQueueNotFound, so ask
		// whether the queue was ever written instead.
		return Backlog{Downstream: downstream}, nil
	}
	if err != nil {
		return Backlog{}, fmt.Errorf("queue: backlog of %q: %w", downstream, err)
	}
	prio, err := i.prioritized(context.Background(), downstream)
	if err != nil {
		return Backlog{}, fmt.Errorf("queue: backlog of %q: %w", downstream, err)
	}
	return Backlog{Downstream: downstream, Pending: q.Pending + prio, Active: q.Active, Scheduled: q.Scheduled,
		Retry: q.Retry, Archived: q.Archived, Completed: q.Completed, Processed: q.Processed, Failed: q.Failed}, nil
}

func (i *Inspector) exists(queue string) bool {
	qs, err := i.in.Queues()
	if err != nil {
		return true // unknown: report the original error
	}
	for _, q := range qs {
		if q == queue {
			return true
		}
	}
	return false
}

// Archived lists up to n archived tasks of a downstream with their last
// errors (the visible end state of a task that could not be delivered).
func (i *Inspector) Archived(downstream string, n int) ([]*asynq.TaskInfo, error) {
	ts, err := i.in.ListArchivedTasks(i.space.Queue(downstream), asynq.PageSize(n))
	if errors.Is(err, asynq.ErrQueueNotFound) {
		return nil, nil
	}
	return ts, err
}

// Asynq exposes the underlying asynq Inspector for anything else.
func (i *Inspector) Asynq() *asynq.Inspector { return i.in }

// ErrNoTask: no such task in the downstream's queue.
var ErrNoTask = errors.New("queue: no such task")

// Cancel cancels task id of downstream and returns the state it was in.
// A task that waits (pending, scheduled, retry, archived, completed) is
// deleted: it never reaches the downstream. An active one (taken, waiting
// for its slot or in its call) is cut where it runs: Cancel publishes on
// asynq's cancellation channel (Inspector.CancelProcessing), and the
// process that holds it removes it, unsent if its call had not started,
// with its call's context cancelled if it had; the downstream may have
// seen a call already under way. It fails with ErrNoTask or a Redis error.
func (i *Inspector) Cancel(downstream, id string) (asynq.TaskState, error) {
	q := i.space.Queue(downstream)
	info, err := i.in.GetTaskInfo(q, id)
	if err == nil && info.State == asynq.TaskStateActive {
		return i.cut(downstream, id)
	}
	if err == nil {
		err = i.in.DeleteTask(q, id)
		if err != nil && strings.Contains(err.Error(), "not found in list") {
			// pending on its priority list, which asynq does not know
			var ok bool
			if ok, err = i.cancelPrioritized(context.Background(), downstream, id); err == nil && !ok {
				err = asynq.ErrTaskNotFound // taken or gone meanwhile
			}
		}
	}
	switch {
	case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
		return 0, fmt.Errorf("%w %q in downstream %q", ErrNoTask, id, downstream)
	case err != nil && strings.Contains(err.Error(), "active"):
		return i.cut(downstream, id) // taken meanwhile
	case err != nil:
		return 0, fmt.Errorf("queue: cancel %q of %q: %w", id, downstream, err)
	}
	return info.State, nil
}

// cut asks the process holding active task id to cancel it.
func (i *Inspector) cut(downstream, id string) (asynq.TaskState, error) {
	if err := i.in.CancelProcessing(id); err != nil {
		return 0, fmt.Errorf("queue: cancel %q of %q: %w", id, downstream, err)
	}
	return asynq.TaskStateActive, nil
}

// Find reports which of downstreams holds task id (ids are unique per
// queue; the first that holds it is returned), or ErrNoTask.
func (i *Inspector) Find(downstreams []string, id string) (string, error) {
	for _, ds := range downstreams {
		_, err := i.in.GetTaskInfo(i.space.Queue(ds), id)
		switch {
		case err == nil:
			return ds, nil
		case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
		default:
			return "", fmt.Errorf("queue: find %q: %w", id, err)
		}
	}
	return "", fmt.Errorf("%w %q in any downstream", ErrNoTask, id)
}
