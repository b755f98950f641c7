package lua

import (
	"context"
	"errors"

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
	// Answers, Reserve only, are the keys of the downstream's announced
	// limit and issued count (KEYS[2], KEYS[3]); the zero value skips both.
	Answers AnswerKeys
	// Cost is ARGV[7], Reserve only: the units of one slot (for quotas and
	// the announced limit); 0 means 1.
	Cost int64
	// Guard is ARGV[8], Reserve only: how late after its slot a release may
	// start, in µs; quotas count a unit that much longer.
	Guard int64
	// Claims, Reserve only, is KEYS[4]: the downstream's priority claims
	// (keys.Space.PriorityClaims); required with Answers.
	Claims string
	// Claim, Reserve only, is ARGV[9..11]: the priority of the caller's
	// waiters; the zero value neither reads nor writes claims.
	Claim Claim
	// Quotas, Reserve only, are the downstream's quotas (KEYS[5..],
	// ARGV[12..]); a slot needs room in each.
	Quotas []QuotaArgs
}

// Claim is the priority of the waiters a reservation serves: it reserves
// nothing while a claim of a higher priority stands, and it claims Level
// for TTL when it cannot serve all Waiting of them.
type Claim struct {
	Level   int64 // 1 (first) to 5 (last); 0: none
	TTL     int64 // µs
	Waiting int64 // the caller's waiters of Level
}

// AnswerKeys name the announced-limit HASH and the issued-units STRING of
// one downstream (keys.Space.Announced and Issued); both or neither.
type AnswerKeys struct{ Announced, Issued string }

// QuotaArgs is one quota of a reservation or a settlement.
type QuotaArgs struct {
	// Key is the quota's HASH (keys.Space.Quota).
	Key string
	// Limit is the units allowed per window, at least 1.
	Limit int64
	// Period is the window's length in µs.
	Period int64
	// Sub is a sliding window's sub-window length in µs (units are counted
	// per sub-window); for an aligned window it must equal Period.
	Sub int64
	// Align is -1 for a sliding window; else aligned windows start at
	// Align + k × Period µs since the epoch (0 ≤ Align < Period).
	Align int64
}

func (a BucketArgs) keys(bucket string) []string {
	ks := []string{bucket}
	if a.Answers.Announced == "" {
		return ks // shaping.lua reads quotas only after the answer keys
	}
	ks = append(ks, a.Answers.Announced, a.Answers.Issued, a.Claims)
	for _, q := range a.Quotas {
		ks = append(ks, q.Key)
	}
	return ks
}

func quotaArgv(qs []QuotaArgs) []any {
	var out []any
	for _, q := range qs {
		out = append(out, q.Limit, q.Period, q.Sub, q.Align)
	}
	return out
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
	// Interval, Now).
	NextFree, Now, Base int64
	// Interval is the µs between slots: BucketArgs.Interval, or more when
	// the announced limit paces.
	Interval int64
	// Issued is the issued count before the call: slot j's units were
	// issued up to Issued + (j+1) × cost.
	Issued int64
	// HeldBy says what moved the first slot: 0 nothing, i quota i
	// (1-based), -1 the announced limit (spent), -2 its pace, -3 a claim
	// of a higher priority (nothing reserved).
	HeldBy int64
	// Quotas is each quota's state after the call, in BucketArgs order.
	Quotas []QuotaUse
}

// QuotaUse is one quota's state: the units that count now, and when that
// next falls (µs since the epoch; 0 when nothing counts).
type QuotaUse struct{ Used, Reset int64 }

// Reserve reserves up to a.Slots slots that start within a.MaxWait (mode
// 0), each needing room in every quota of a.Quotas and in the announced
// limit.
func (s *Store) Reserve(ctx context.Context, key string, a BucketArgs) (BucketReply, error) {
	return s.bucket(ctx, key, a, modeCharge)
}

// PeekBucket reports the wait a reservation would get; it writes nothing
// and checks no quota (mode 1).
func (s *Store) PeekBucket(ctx context.Context, key string, a BucketArgs) (BucketReply, error) {
	a.Answers, a.Quotas = AnswerKeys{}, nil
	return s.bucket(ctx, key, a, modePeek)
}

// PushBack moves next_free to at least now + a.Interval (mode 2).
func (s *Store) PushBack(ctx context.Context, key string, a BucketArgs) (BucketReply, error) {
	a.Answers, a.Quotas = AnswerKeys{}, nil
	return s.bucket(ctx, key, a, modeRefund)
}

// ResetBucket deletes next_free (mode 3).
func (s *Store) ResetBucket(ctx context.Context, key string) error {
	_, err := s.bucket(ctx, key, BucketArgs{MaxWait: -1}, modeReset)
	return err
}

func (s *Store) bucket(ctx context.Context, key string, a BucketArgs, mode int) (BucketReply, error) {
	a, err := a.checked()
	if err != nil {
		return BucketReply{}, err
	}
	v, err := s.ints(ctx, shaping, a.keys(key), 8+2*len(a.Quotas), a.argv(mode)...)
	if err != nil {
		return BucketReply{}, err
	}
	return bucketReply(v, len(a.Quotas)), nil
}

// checked is a as shaping.lua reads it: quotas only after the answer
// keys (none without them), and the claims key with them.
func (a BucketArgs) checked() (BucketArgs, error) {
	if a.Answers.Announced == "" {
		a.Quotas = nil
	} else if a.Claims == "" {
		return a, errors.New("lua: shaping: a reservation with answer keys needs the claims key")
	}
	return a, nil
}

// argv is shaping.lua's ARGV for a in mode.
func (a BucketArgs) argv(mode int) []any {
	return append([]any{a.Interval, a.Burst, a.MaxWait, mode, a.Now, max(a.Slots, 1), max(a.Cost, 1), a.Guard,
		a.Claim.Level, a.Claim.TTL, a.Claim.Waiting}, quotaArgv(a.Quotas)...)
}

// bucketReply reads shaping.lua's reply v (8 + 2 × quotas integers).
func bucketReply(v []int64, quotas int) BucketReply {
	r := BucketReply{Reserved: v[0], Wait: v[1], NextFree: v[2], Now: v[3], Base: v[4], Interval: v[5],
		Issued: v[6], HeldBy: v[7]}
	for i := range quotas {
		r.Quotas = append(r.Quotas, QuotaUse{Used: v[8+2*i], Reset: v[9+2*i]})
	}
	return r
}

// SettleArgs are answer.lua's arguments: a task's settled cost and the
// limit its answer announced.
type SettleArgs struct {
	// Answers are KEYS[2] and KEYS[3]; required.
	Answers AnswerKeys
	// Diff is ARGV[1]: the units the call cost beyond its reservation
	// (negative: fewer); 0 settles nothing.
	Diff int64
	// Unit is ARGV[2]: the µs one unit occupies in the bucket.
	Unit int64
	// Burst is ARGV[3]: the burst allowance in µs.
	Burst int64
	// Slot is ARGV[4]: the task's slot, µs since the epoch.
	Slot int64
	// Seq is ARGV[5]: the issued count just after the task's units.
	Seq int64
	// Announce, when set, is ARGV[6..10]: what the answer announced.
	Announce *Announcement
	// Now is ARGV[11]: µs since the epoch; 0 reads Redis TIME.
	Now int64
	// Guard is ARGV[12], as in BucketArgs.
	Guard int64
	// Floor is ARGV[13]: a refund never moves next_free before it (µs since
	// the epoch; the slot plus the actual cost's interval).
	Floor int64
	// Quotas are the downstream's quotas (KEYS[4..], ARGV[14..]).
	Quotas []QuotaArgs
}

// Announcement is a limit a downstream's answer announced.
type Announcement struct {
	// Remaining is the units the downstream said are left, at least 0.
	Remaining int64
	// Until is when its window resets, µs since the epoch.
	Until int64
	// Limit is the window's limit in units; 0 when not said.
	Limit int64
	// Source says which header said it: ratelimit, x-ratelimit or
	// retry-after.
	Source string
}

// SettleReply is answer.lua's reply.
type SettleReply struct {
	// NextFree is next_free after the call, µs since the epoch.
	NextFree int64
	// Left is the units the announcement in force leaves; -1 when none is.
	Left int64
	// Stored reports whether SettleArgs.Announce was stored (false: a
	// later task's announcement is in force, or its reset is past).
	Stored bool
	// Now is the script's now, µs since the epoch.
	Now int64
}

// Settle applies what one answer said: the cost difference (bucket,
// quotas, announced limit) and the announcement, if any.
func (s *Store) Settle(ctx context.Context, bucket string, a SettleArgs) (SettleReply, error) {
	ks := []string{bucket, a.Answers.Announced, a.Answers.Issued}
	for _, q := range a.Quotas {
		ks = append(ks, q.Key)
	}
	ann, rem, until, limit, src := 0, int64(0), int64(0), int64(0), ""
	if n := a.Announce; n != nil {
		ann, rem, until, limit, src = 1, n.Remaining, n.Until, n.Limit, n.Source
	}
	args := append([]any{a.Diff, a.Unit, a.Burst, a.Slot, a.Seq, ann, rem, until, limit, src, a.Now, a.Guard, a.Floor},
		quotaArgv(a.Quotas)...)
	v, err := s.ints(ctx, answer, ks, 4, args...)
	if err != nil {
		return SettleReply{}, err
	}
	return SettleReply{NextFree: v[0], Left: v[1], Stored: v[2] == 1, Now: v[3]}, nil
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
	// Levels, when set, are KEYS[4..7]: the queue's priority lists of
	// levels 1, 2, 4 and 5 (keys.Space.TakePriority); a task of one of
	// those goes back to its list.
	Levels []string
}

// Recover returns a dead process's held tasks of queue q to the front of
// its pending list: moved went back, dropped had no task hash.
func (s *Store) Recover(ctx context.Context, q keys.AsynqQueue, a RecoverArgs) (moved, dropped int64, err error) {
	v, err := s.ints(ctx, recoverScript, append([]string{q.Lease(), q.Active(), q.Pending()}, a.Levels...), 2,
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
