package lua

import (
	"context"

	"github.com/shaper-io/shaper/internal/keys"
)

// BucketArgs are shaping.lua's arguments (KEYS[1]: the STRING next_free).
type BucketArgs struct {
	// Interval is ARGV[1]: the µs one slot of this cost occupies; for
	// PushBack, how far past now next_free moves.
	Interval int64
	// Burst is ARGV[2]: the burst allowance in µs, (burst-1) × the interval
	// of one unit; 0 is none.
	Burst int64
	// MaxWait is ARGV[3]: reserve only a slot that starts within this many
	// µs; -1 is no limit.
	MaxWait int64
	// Now is ARGV[5]: the time in µs since the epoch; 0 reads Redis TIME.
	Now int64
	// Slots is ARGV[6], Reserve only: up to this many consecutive slots
	// (1 to 1000); 0 means 1.
	Slots int64
}

// BucketReply is shaping.lua's reply.
type BucketReply struct {
	// Reserved is how many slots were reserved (0: none, nothing written).
	Reserved int64
	// Wait is the µs from Now until the first slot starts (the wait it
	// would have had, when none was reserved).
	Wait int64
	// NextFree, Now and Base are µs since the epoch: next_free after the
	// call, the script's now, and the base of slot j = max(Base + j ×
	// interval, Now).
	NextFree, Now, Base int64
}

// Reserve reserves up to a.Slots slots that start within a.MaxWait (mode 0).
func (s *Store) Reserve(ctx context.Context, key string, a BucketArgs) (BucketReply, error) {
	return s.bucket(ctx, key, a, modeCharge)
}

// PeekBucket reports the wait a reservation would get; it writes nothing
// (mode 1).
func (s *Store) PeekBucket(ctx context.Context, key string, a BucketArgs) (BucketReply, error) {
	return s.bucket(ctx, key, a, modePeek)
}

// PushBack moves next_free to at least now + a.Interval (mode 2).
func (s *Store) PushBack(ctx context.Context, key string, a BucketArgs) (BucketReply, error) {
	return s.bucket(ctx, key, a, modeRefund)
}

// ResetBucket deletes next_free (mode 3).
func (s *Store) ResetBucket(ctx context.Context, key string) error {
	_, err := s.bucket(ctx, key, BucketArgs{MaxWait: -1}, modeReset)
	return err
}

func (s *Store) bucket(ctx context.Context, key string, a BucketArgs, mode int) (BucketReply, error) {
	v, err := s.ints(ctx, shaping, []string{key}, 5, a.Interval, a.Burst, a.MaxWait, mode, a.Now, max(a.Slots, 1))
	if err != nil {
		return BucketReply{}, err
	}
	return BucketReply{Reserved: v[0], Wait: v[1], NextFree: v[2], Now: v[3], Base: v[4]}, nil
}

// SetState sets fields of a downstream's runtime-state HASH (control.lua):
// each pair is a field and its value, "" deleting the field; the hash's
// TTL becomes ttlMS milliseconds. It returns the fields left in the hash.
func (s *Store) SetState(ctx context.Context, key string, ttlMS int64, pairs ...[2]string) (int64, error) {
	args := []any{ttlMS}
	for _, p := range pairs {
		args = append(args, p[0], p[1])
	}
	return control.Run(ctx, s.rdb, []string{key}, args...).Int64()
}

// AdaptiveEvent is what adaptive.lua is told (ARGV[1]).
type AdaptiveEvent string

// The adaptive events.
const (
	AdaptiveDecrease AdaptiveEvent = "dec" // a 429, 503 or timeout
	AdaptiveIncrease AdaptiveEvent = "inc" // a run of successes
	AdaptiveGet      AdaptiveEvent = "get" // read only
)

// AdaptiveArgs are adaptive.lua's arguments; rates are in milli-units per
// second.
type AdaptiveArgs struct {
	Start    int64 // ARGV[2]: the rate when the hash has none
	Floor    int64 // ARGV[3]
	Ceiling  int64 // ARGV[4]: never exceeded
	Decrease int64 // ARGV[5]: the decrease factor in permille (750 = ×0.75)
	Step     int64 // ARGV[6]: the increase step
	Interval int64 // ARGV[7]: µs; at most one decrease per interval
	TTL      int64 // ARGV[8]: ms
	Now      int64 // ARGV[9]: µs since the epoch; 0 reads Redis TIME
}

// Adaptive applies event to the shared adaptive rate in the state HASH at
// key and returns the rate after it (milli-units per second).
func (s *Store) Adaptive(ctx context.Context, key string, event AdaptiveEvent, a AdaptiveArgs) (int64, error) {
	return adaptive.Run(ctx, s.rdb, []string{key}, string(event), a.Start, a.Floor, a.Ceiling, a.Decrease,
		a.Step, a.Interval, a.TTL, a.Now).Int64()
}

// RecoverArgs are recover.lua's arguments; times are whole seconds.
type RecoverArgs struct {
	Lease int64 // ARGV[2]: asynq's lease duration
	Stale int64 // ARGV[3]: a lease not extended for this long is a dead process's
	Batch int64 // ARGV[4]: at most this many tasks per call
	Now   int64 // ARGV[5]: unix seconds; 0 reads Redis TIME
	Skew  int64 // ARGV[6]: leases expired more than Lease - Skew ago are asynq's
}

// Recover returns a dead process's held tasks of queue q to the front of
// its pending list: moved went back, dropped had no task hash.
func (s *Store) Recover(ctx context.Context, q keys.AsynqQueue, a RecoverArgs) (moved, dropped int64, err error) {
	v, err := s.ints(ctx, recoverScript, []string{q.Lease(), q.Active(), q.Pending()}, 2,
		q.TaskPrefix(), a.Lease, a.Stale, a.Batch, a.Now, a.Skew)
	if err != nil {
		return 0, 0, err
	}
	return v[0], v[1], nil
}

// QuarantineArgs are quarantine.lua's arguments.
type QuarantineArgs struct {
	ID     string // ARGV[1]: the task id
	Reason string // ARGV[2]: no_task_hash, no_msg, empty_msg, undecodable_msg or id_mismatch
	Judged string // ARGV[3]: the msg judged; the entry moves only while it still is this
	Keep   int64  // ARGV[4]: entries the quarantine keeps
	TTL    int64  // ARGV[5]: ms
	Bytes  int64  // ARGV[6]: msg bytes kept per entry
}

// Quarantine moves task a.ID out of every structure of queue q into the
// quarantine LIST list, if it is still as judged. It returns the number of
// structures the id left; 0 when it had changed (nothing written).
func (s *Store) Quarantine(ctx context.Context, q keys.AsynqQueue, list string, a QuarantineArgs) (int64, error) {
	ks := []string{q.Task(a.ID), q.Pending(), q.Active(), q.Scheduled(), q.Retry(), q.Archived(), q.Lease(),
		q.Completed(), list}
	return quarantine.Run(ctx, s.rdb, ks, a.ID, a.Reason, a.Judged, a.Keep, a.TTL, a.Bytes).Int64()
}
