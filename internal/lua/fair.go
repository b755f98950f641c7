package lua

import (
	"context"
	"strconv"
)

var fair = script("prelude_fairpos.lua", "prelude_fairturn.lua", "fair.lua")

// FairArgs are fair.lua's arguments common to park, feed and resume. Its
// KEYS are the six fair-share keys (keys.FairKeys.List), asynq's pending
// key of the queue, the fair-share keys Controls, Held and Pos, and
// asynq's scheduled key of the queue.
type FairArgs struct {
	// Max is ARGV[2]: at most this many due moves per call.
	Max int64
	// TTLms is ARGV[3]: the TTL of the fair-share keys in ms.
	TTLms int64
	// NowMs is ARGV[4]: ms since the epoch; 0 reads Redis TIME.
	NowMs int64
	// TaskPrefix is ARGV[5]: asynq's task key prefix of the queue.
	TaskPrefix string
}

// FairTask is what park adds: ARGV[6..11].
type FairTask struct {
	ID     string
	Key    string
	Cost   int64
	Weight float64
	// DueMs is when the task may start (ms since the epoch; 0: now).
	DueMs int64
	// PerMs is the per-key ceiling in ms per unit of cost (0: none).
	PerMs float64
}

// FairReply is fair.lua's reply.
type FairReply struct {
	// Moved is how many tasks the call made ready to take: due tasks moved
	// into fair order and held tasks back (park: 1 when the task is in
	// fair order, 0 when it is not yet due).
	Moved int64
	// Parked and Later are the tasks waiting in fair order and not yet
	// due after the call (feed). Park: Parked is 1, or 0 when the task
	// was in neither pending nor scheduled (taken or deleted already);
	// Later is -1. Resume:
	// Parked is how many tasks went back to fair order.
	Parked, Later int64
	// Keys is how many admission keys have tasks waiting (feed).
	Keys int64
	// Ahead (park) is how many tasks go before this one (parked with an
	// earlier turn, and the tasks in pending not in fair order); -1 when
	// it is not yet due or its key is paused.
	Ahead int64
}

// FairPark parks task t (just enqueued by asynq: pending, or scheduled
// with a ProcessAt) in fair order, or in later until it is due.
func (s *Store) FairPark(ctx context.Context, keys []string, a FairArgs, t FairTask) (FairReply, error) {
	return s.fair(ctx, keys, a, "park", t.ID, t.Key, t.Cost, strconv.FormatFloat(t.Weight, 'g', -1, 64),
		t.DueMs, strconv.FormatFloat(t.PerMs, 'g', -1, 64))
}

// FairResume moves up to limit of key's held tasks back to fair order;
// the reply's Parked is how many it moved.
func (s *Store) FairResume(ctx context.Context, keys []string, a FairArgs, key string, limit int64) (FairReply, error) {
	return s.fair(ctx, keys, a, "resume", key, limit)
}

// FairFeed moves due tasks (and held tasks of keys no longer paused)
// into fair order, and forgets finish tags and ceilings that are over.
func (s *Store) FairFeed(ctx context.Context, keys []string, a FairArgs) (FairReply, error) {
	return s.fair(ctx, keys, a, "feed")
}

// FairTend is FairFeed when tasks wait in later or held (their moves are
// due often); otherwise it reads only how many keys have tasks waiting,
// and its reply's Parked and Later are -1 (not read).
func (s *Store) FairTend(ctx context.Context, keys []string, a FairArgs) (FairReply, error) {
	return s.fair(ctx, keys, a, "tend")
}

func (s *Store) fair(ctx context.Context, keys []string, a FairArgs, op string, more ...any) (FairReply, error) {
	args := append([]any{op, a.Max, a.TTLms, a.NowMs, a.TaskPrefix}, more...)
	v, err := s.ints(ctx, fair, keys, 5, args...)
	if err != nil {
		return FairReply{}, err
	}
	return FairReply{Moved: v[0], Parked: v[1], Later: v[2], Keys: v[3], Ahead: v[4]}, nil
}
