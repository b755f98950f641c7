package queue

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/priority"
)

// priorityOf is the priority t goes at: its own, else its downstream's
// default, else priority.Default. A downstream that serves no priorities
// (absent from ProducerConfig.Priority) takes only the default.
func (p *Producer) priorityOf(t Task) (int, error) {
	def, serves := p.cfg.Priority[t.Downstream]
	switch {
	case t.Priority == 0 && serves && def != 0:
		return def, nil
	case t.Priority == 0:
		return priority.Default, nil
	case !serves && t.Priority != priority.Default:
		return 0, fmt.Errorf("%w: priority %d: downstream %q serves no priorities (set priority in its config)", ErrInvalidTask, t.Priority, t.Downstream)
	}
	return t.Priority, nil
}

// place puts task id at its priority (priority.lua): a task of priority 3
// stays in pending. A task the dispatcher took meanwhile is served at the
// default priority (its place in pending).
func (p *Producer) place(ctx context.Context, downstream, id string, prio int) error {
	if prio == priority.Default {
		return nil
	}
	_, err := p.scripts.PlacePriority(context.WithoutCancel(ctx), p.space.Asynq(downstream), p.space.TakePriority(downstream, prio), id, prio)
	return err
}

// prioritized reports the priority lists' lengths of downstream (their
// tasks are pending, waiting outside asynq's pending list).
func (i *Inspector) prioritized(ctx context.Context, downstream string) (int, error) {
	pipe := i.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, 0, len(priority.Levels))
	for _, lv := range priority.Levels {
		cmds = append(cmds, pipe.LLen(ctx, i.space.TakePriority(downstream, lv)))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	n := 0
	for _, c := range cmds {
		n += int(c.Val())
	}
	return n, nil
}

// cancelPrioritized deletes a pending task that waits on its priority
// list, which asynq's DeleteTask cannot find; false when it is on none.
func (i *Inspector) cancelPrioritized(ctx context.Context, downstream, id string) (bool, error) {
	q := i.space.Asynq(downstream)
	lv, err := i.rdb.HGet(ctx, q.Task(id), priority.Field).Int()
	if err != nil {
		return false, nil // no priority recorded: not on a list
	}
	return i.scripts.CancelPrioritized(ctx, q, i.space.TakePriority(downstream, lv), id)
}
