package keys

import (
	"strconv"
	"time"
)

// The keys of asynq v0.26 (internal/base/base.go) that the take engine
// (shaping/take) reads and writes besides those in keys.go. asynq stays
// their owner: their types, formats and expiry follow asynq's own
// scripts, and the take scripts write them exactly as asynq's processor
// would.

// Paused is the STRING whose existence pauses the queue
// (asynq.Inspector.PauseQueue sets it).
func (a AsynqQueue) Paused() string { return a.base() + "paused" }

// ProcessedTotal is the STRING count of tasks processed (done or failed)
// since the queue began, wrapped to 1 at MaxInt64 as asynq does.
func (a AsynqQueue) ProcessedTotal() string { return a.base() + "processed" }

// FailedTotal is the STRING count of failed tasks since the queue began.
func (a AsynqQueue) FailedTotal() string { return a.base() + "failed" }

// Processed is the STRING count of tasks processed on t's UTC day
// (asynq expires it 90 days after the day's first count).
func (a AsynqQueue) Processed(t time.Time) string {
	return a.base() + "processed:" + t.UTC().Format("2006-01-02")
}

// Failed is the STRING count of tasks failed on t's UTC day.
func (a AsynqQueue) Failed(t time.Time) string {
	return a.base() + "failed:" + t.UTC().Format("2006-01-02")
}

// GroupPrefix is the prefix of the queue's aggregation group ZSETs; the
// forwarder moves a due task that names a group there, as asynq's does.
func (a AsynqQueue) GroupPrefix() string { return a.base() + "g:" }

// TakeMaintained is the STRING whose presence says a process did the
// take engine's maintenance of downstream ds's queue (forwarding due
// tasks, recovering expired leases) lately: one process's maintenance
// serves all for its TTL. It carries the queue's hash tag.
func (s Space) TakeMaintained(ds string) string {
	return s.prefix() + ":take:{" + s.Queue(ds) + "}:maintained"
}

// TakePriority is the LIST of downstream ds's waiting tasks of priority
// p (1, 2, 4 or 5; a task of the default priority 3 waits in asynq's
// pending list), in the queue's hash tag so take.lua serves every list
// in one call.
func (s Space) TakePriority(ds string, p int) string {
	return s.prefix() + ":take:{" + s.Queue(ds) + "}:priority:" + strconv.Itoa(p)
}

// TakeTurns is the STRING of downstream ds's weighted priority, the
// levels' tags that take.lua reads and writes in the take (with a TTL),
// in the queue's hash tag beside the priority lists.
func (s Space) TakeTurns(ds string) string {
	return s.prefix() + ":take:{" + s.Queue(ds) + "}:turns"
}

// Collapse is the STRING naming the waiting task that holds collapse key
// key of downstream ds (queue.Task.CollapseKey), in the queue's hash tag
// so the claim reads the task's hash on the same cluster slot.
func (s Space) Collapse(ds, key string) string {
	return s.prefix() + ":collapse:{" + s.Queue(ds) + "}:" + key
}
