// Package explain says why a task waits, in words an operator can act
// on: its own state (scheduled until a time, a retry with its last error,
// its priority, its fair-share turn, taken for its call, archived and
// why) and, for a task that waits in the queue, what holds its downstream
// now: the why-waiting line of the status page, as the live process that
// announced last saw it. GET on a task and shaper ctl explain share it.
package explain

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/control"
	"github.com/shaper-io/shaper/internal/envelope"
	"github.com/shaper-io/shaper/internal/fairindex"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/priority"
	"github.com/shaper-io/shaper/internal/statuspage"
	"github.com/shaper-io/shaper/queue"
)

// Explanation is why one task is where it is.
type Explanation struct {
	ID         string `json:"id"`
	Downstream string `json:"downstream"`
	// State is asynq's (pending, scheduled, retry, active, archived,
	// completed, aggregating).
	State string `json:"state"`
	// Reason is one of the Reason constants; Text says it in one line.
	Reason string `json:"reason"`
	Text   string `json:"text"`
	// Priority is the task's priority, 1 (first) to 5 (last).
	Priority int `json:"priority"`
	// Due is when a scheduled task or a retry becomes due.
	Due *time.Time `json:"due,omitempty"`
	// Held is, for a task that waits in the queue (Reason Queued,
	// FairTurn, KeyPaused or KeyCap), what holds its downstream now; nil when no live process
	// announced it.
	Held *statuspage.Why `json:"downstream_why,omitempty"`
	// Ahead is, for a queued task, how many tasks of a higher priority
	// wait ahead of it (taken first); 0 when none.
	Ahead int64 `json:"higher_priority_ahead,omitempty"`
}

// The reasons a task is where it is.
const (
	Queued    = "queued"     // pending: it goes as its downstream's slots come (Held says what paces them)
	FairTurn  = "fair_turn"  // parked in fair order until its key's turn
	KeyPaused = "key_paused" // its key is paused (shaper ctl key … pause)
	KeyCap    = "key_cap"    // its key is at its key_concurrency: it waits for one of its calls to end
	Scheduled = "scheduled"  // not due yet: a ProcessAt, or deferred by admission
	Retry     = "retry"      // a failed attempt; the next one is due at Due
	Taken     = "taken"      // active: taken with its slot, waiting for it or in its call
	Archived  = "archived"   // failed for good (retries spent, deadline passed, malformed)
	Completed = "completed"  // delivered, kept for the downstream's retention
	Batching  = "batching"   // gathered into a batch
)

// ErrNoTask is queue.ErrNoTask: no such task in the downstream.
var ErrNoTask = queue.ErrNoTask

// Task explains task id of downstream ds at now; in is an Inspector on
// rdb under prefix.
func Task(ctx context.Context, in *queue.Inspector, rdb redis.UniversalClient, prefix, ds, id string, now time.Time) (Explanation, error) {
	sp := keys.New(prefix)
	info, err := in.Asynq().GetTaskInfo(sp.Queue(ds), id)
	if errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) {
		return Explanation{}, fmt.Errorf("%w %q in downstream %q", ErrNoTask, id, ds)
	}
	if err != nil {
		return Explanation{}, fmt.Errorf("explain: %w", err)
	}
	e := Explanation{ID: id, Downstream: ds, State: info.State.String(), Priority: priority.Default}
	if p, err := rdb.HGet(ctx, sp.Asynq(ds).Task(id), priority.Field).Int(); err == nil {
		e.Priority = p
	}
	e.Reason, e.Text = reason(info, now, e.Priority)
	if e.Reason == Queued {
		fair, err := rdb.HExists(ctx, sp.Fair(ds).Pos, id).Result()
		if err != nil {
			return Explanation{}, fmt.Errorf("explain: %w", err)
		}
		if fair {
			meta, _ := envelope.Decode(info.Headers)
			e.Reason, e.Text = FairTurn, fmt.Sprintf("waits in the queue, in fair order, for its key's turn (key %q)", meta.Key)
		}
	}
	if !info.NextProcessAt.IsZero() && (e.Reason == Scheduled || e.Reason == Retry) {
		at := info.NextProcessAt
		e.Due = &at
	}
	if e.Reason == Queued && e.Priority > 1 {
		n, err := higherAhead(ctx, rdb, sp, ds, e.Priority)
		if err != nil {
			return Explanation{}, fmt.Errorf("explain: %w", err)
		}
		if n > 0 {
			e.Ahead = n
			e.Text += fmt.Sprintf("; %d task(s) of a higher priority wait ahead of it", n)
		}
	}
	if e.Reason == FairTurn {
		meta, _ := envelope.Decode(info.Headers)
		kc, err := control.New(rdb, prefix).KeyControls(ctx, ds)
		if err != nil {
			return Explanation{}, fmt.Errorf("explain: %w", err)
		}
		e.Reason, e.Text = keyReason(kc[meta.Key], meta.Key, ds, e.Reason, e.Text)
		if e.Reason == FairTurn {
			held, err := fairindex.CapHeld(ctx, rdb, sp.Fair(ds), meta.Key, id)
			if err != nil {
				return Explanation{}, fmt.Errorf("explain: %w", err)
			}
			if held {
				e.Reason, e.Text = KeyCap, fmt.Sprintf("waits in the queue for a place among its key's calls in flight (key %q is at its key_concurrency); it goes at its turn once one of them ends", meta.Key)
			}
		}
	}
	if e.Reason == Queued || e.Reason == FairTurn || e.Reason == KeyPaused || e.Reason == KeyCap {
		why, ok, err := statuspage.FleetWhy(ctx, rdb, prefix, ds, now)
		if err != nil {
			return Explanation{}, fmt.Errorf("explain: %w", err)
		}
		if ok {
			e.Held = &why
		}
	}
	return e, nil
}

// higherAhead counts the tasks of downstream ds that wait at a priority
// before prio (priority 3 waits in asynq's pending list, the others in
// lists of their own): each is taken before a task of prio. A downstream
// without priorities has no other lists: none.
func higherAhead(ctx context.Context, rdb redis.UniversalClient, sp keys.Space, ds string, prio int) (int64, error) {
	var n int64
	for l := priority.First; l < prio; l++ {
		k := sp.TakePriority(ds, l)
		if l == priority.Default {
			k = sp.Asynq(ds).Pending()
		}
		c, err := rdb.LLen(ctx, k).Result()
		if err != nil {
			return 0, err
		}
		n += c
	}
	return n, nil
}

// keyReason adds what an operator set on the task's key (shaper ctl key)
// to a fair task's reason and text.
func keyReason(c control.KeyControl, key, ds, reason, text string) (string, string) {
	if c.Paused {
		return KeyPaused, fmt.Sprintf("its key %q is paused by an operator: it waits until shaper ctl key %s %s resume (or clear)", key, ds, key)
	}
	if !c.Rate.IsZero() {
		text += fmt.Sprintf("; an operator capped its key at %s", c.Rate.RateString())
	}
	if c.Weight > 0 {
		text += fmt.Sprintf("; an operator set its key's weight to %g", c.Weight)
	}
	return reason, text
}

// reason classifies info at now.
func reason(info *asynq.TaskInfo, now time.Time, prio int) (string, string) {
	in := func(t time.Time) string { return statuspage.HumanDuration(t.Sub(now)) }
	switch info.State {
	case asynq.TaskStatePending:
		return Queued, fmt.Sprintf("waits in the queue at priority %d; it goes as the downstream's slots come", prio)
	case asynq.TaskStateScheduled:
		return Scheduled, fmt.Sprintf("scheduled: due at %s (in %s)", info.NextProcessAt.UTC().Format(time.RFC3339), in(info.NextProcessAt))
	case asynq.TaskStateRetry:
		return Retry, fmt.Sprintf("attempt %d failed (%s); the next is due at %s (in %s)", info.Retried, info.LastErr,
			info.NextProcessAt.UTC().Format(time.RFC3339), in(info.NextProcessAt))
	case asynq.TaskStateActive:
		return Taken, "taken with its slot: waiting for the slot to start, or in its call"
	case asynq.TaskStateArchived:
		return Archived, "archived, not retried: " + info.LastErr
	case asynq.TaskStateCompleted:
		return Completed, fmt.Sprintf("delivered at %s", info.CompletedAt.UTC().Format(time.RFC3339))
	case asynq.TaskStateAggregating:
		return Batching, "gathered into the next batch"
	}
	return info.State.String(), info.State.String()
}
