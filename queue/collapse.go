package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/shaper-io/shaper/internal/asynqmsg"
)

// CollapseMode says what a task does when a task with its CollapseKey
// still waits (not yet taken) in its downstream.
type CollapseMode int

const (
	// KeepLast: the newcomer's payload and headers replace the waiting
	// task's, which keeps its id, its place and its priority.
	KeepLast CollapseMode = iota + 1
	// KeepFirst: the newcomer is dropped; the waiting task stays as it is.
	KeepFirst
)

// String returns "keep_last" or "keep_first".
func (m CollapseMode) String() string {
	switch m {
	case KeepLast:
		return "keep_last"
	case KeepFirst:
		return "keep_first"
	}
	return fmt.Sprintf("CollapseMode(%d)", int(m))
}

// Collapse is a downstream's collapsing of redundant calls
// (ProducerConfig.Collapse).
type Collapse struct {
	// Mode is KeepLast or KeepFirst.
	Mode CollapseMode
	// Window bounds how long a waiting task collapses newcomers after it
	// was enqueued; 0 means DefaultCollapseWindow.
	Window time.Duration
}

// DefaultCollapseWindow is Collapse.Window's default.
const DefaultCollapseWindow = 24 * time.Hour

// MaxCollapseKey is the longest CollapseKey, in bytes.
const MaxCollapseKey = 1024

// collapse collapses t into the waiting task that holds its CollapseKey,
// if there is one: done is true and rec says so (Outcome Collapsed,
// CollapsedInto). Otherwise t's id (t.UniqueKey, set here when empty)
// holds the key, and the caller enqueues t and releases the key if that
// fails. A task taken while the newcomer replaces it is not touched: the
// newcomer then waits behind it.
func (p *Producer) collapse(ctx context.Context, c Collapse, t *Task) (rec Receipt, done bool, err error) {
	q, index := p.space.Asynq(t.Downstream), p.space.Collapse(t.Downstream, t.CollapseKey)
	if t.UniqueKey == "" {
		t.UniqueKey = uuid.NewString()
	}
	st := p.scripts
	for range 3 { // a replace loses only to a take; then the key is free
		cl, err := st.ClaimCollapse(ctx, q, index, t.UniqueKey, cmp.Or(c.Window, DefaultCollapseWindow))
		if err != nil {
			return Receipt{}, true, fmt.Errorf("%w: %w", ErrEnqueue, err)
		}
		if cl.Claimed {
			return Receipt{}, false, nil
		}
		if c.Mode == KeepFirst {
			return p.collapsed(t, cl.Holder, c.Mode), true, nil
		}
		m, err := asynqmsg.Decode(cl.Msg)
		if err != nil {
			return Receipt{}, false, nil // an unreadable holder collapses nothing: t is enqueued beside it
		}
		meta, _ := p.meta(*t)
		ok, err := st.ReplaceCollapsed(ctx, q, index, cl.Holder, cl.Msg, m.WithPayload(t.Payload, meta.Headers()))
		if err != nil {
			return Receipt{}, true, fmt.Errorf("%w: %w", ErrEnqueue, err)
		}
		if ok {
			return p.collapsed(t, cl.Holder, c.Mode), true, nil
		}
	}
	return Receipt{}, false, nil
}

// collapsed is the receipt of t collapsed into task id.
func (p *Producer) collapsed(t *Task, id string, mode CollapseMode) Receipt {
	if p.m != nil {
		p.m.Collapsed.WithLabelValues(t.Downstream, mode.String()).Inc()
	}
	return Receipt{Outcome: Collapsed, ID: id, CollapsedInto: id, Downstream: t.Downstream, Queue: p.space.Queue(t.Downstream)}
}

// releaseCollapse frees t's collapse key after its enqueue failed.
func (p *Producer) releaseCollapse(ctx context.Context, t Task, err *error) {
	index := p.space.Collapse(t.Downstream, t.CollapseKey)
	if rerr := p.scripts.ReleaseCollapse(context.WithoutCancel(ctx), index, t.UniqueKey); rerr != nil {
		*err = errors.Join(*err, rerr)
	}
}

// collapses reports whether downstream collapses redundant calls.
func (p *Producer) collapses(downstream string) bool {
	_, ok := p.cfg.Collapse[downstream]
	return ok
}
