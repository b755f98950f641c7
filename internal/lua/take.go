package lua

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/priority"
)

// The take engine's scripts (shaping/take): take a task with its slot, and
// finish it in asynq's storage as asynq's own processor would.
var (
	takeScript = script("prelude_fairpos.lua", "prelude_fairturn.lua", "prelude_reserve.lua", "prelude_taskmsg.lua", "prelude_capheld.lua",
		"take.lua", "take_fairline.lua", "take_lists.lua", "take_pick.lua")
	takeDone      = script("take_done.lua")
	takeFail      = script("take_fail.lua")
	takeRequeue   = script("take_requeue.lua")
	takeHold      = script("prelude_fairpos.lua", "take_hold.lua")
	takeExtend    = script("take_extend.lua")
	maxInt64Field = int64(math.MaxInt64)
)

// TakeArgs are take.lua's arguments for one downstream's queue.
type TakeArgs struct {
	// Bucket is KEYS[1], the downstream's next_free (keys.Space.Bucket).
	Bucket string
	// Queue names asynq's keys of the downstream's queue (KEYS[2..7]).
	Queue keys.AsynqQueue
	// Interval is ARGV[1]: µs between slots; 0 is no rate limit.
	Interval int64
	// Burst is ARGV[2]: the burst allowance in µs; 0 is none.
	Burst int64
	// LookAhead is ARGV[3]: take only slots starting within this many µs.
	LookAhead int64
	// Slots is ARGV[4]: the most tasks to take (1 to 1000); 0 means 1.
	Slots int64
	// Budget is ARGV[5]: the most unexpired leases the queue may hold; 0
	// means 1.
	Budget int64
	// Lease is ARGV[6]: the lease of each task taken; under a second means
	// one second.
	Lease time.Duration
	// Maintain is ARGV[9]: forward due scheduled and retry tasks, put
	// back tasks whose lease expired and delete completed tasks past
	// their retention (asynq's janitor), before taking.
	Maintain bool
	// Now is ARGV[10]: µs since the epoch; 0 reads Redis TIME. A take
	// with a rate reads TIME (every process's slots come from one clock);
	// one without passes its process's clock, as asynq's dequeue does.
	Now int64
	// Maintained, when set, is KEYS[9] (keys.Space.TakeMaintained): the
	// maintenance then runs at most once per MaintainEvery across every
	// process, and the other calls skip it (an idle queue's then costs an
	// LLEN, not five commands).
	Maintained    string
	MaintainEvery time.Duration
	// Levels, when set, are KEYS[10..13]: the priority lists of levels 1,
	// 2, 4 and 5 (keys.Space.TakePriority, in that order); a take serves
	// them and pending in priority order. They need Maintained.
	Levels []string
	// Weights, with Levels, are ARGV[13]: the levels' weights, served by
	// weighted instead of strict priority (the zero value: strict).
	// Turns is KEYS[14], their state (keys.Space.TakeTurns), required
	// with Weights.
	Weights priority.Weights
	Turns   string
	// Fair, when set, are KEYS[15..22]: the downstream's fair order
	// (fair.lua's keys); a take serves pending, then the parked task with
	// the least start tag. FairTTL is ARGV[15], the TTL fair.lua gives
	// them. They need Maintained.
	Fair    *keys.FairKeys
	FairTTL time.Duration
	// Reserve, when set, has the take reserve its tasks' slots as
	// Store.Reserve does on Bucket (ARGV[16..]: the rate, burst, quotas,
	// announced limit, cost and Now of Reserve, 0 reading Redis TIME, not
	// the take's Now; its MaxWait and Slots are the take's LookAhead and
	// the tasks it may take), so a task
	// moves only with its slot. Interval and Burst must be 0. Lead, with Reserve, is ARGV[17]:
	// the take reserves nothing (TakeEarly) while the bucket's next slot
	// starts further ahead than this (0: any slot within LookAhead).
	Reserve *BucketArgs
	Lead    int64
	// Ceiling, with Reserve and Fair, caps each admission key's slots
	// (ARGV[18..21]); nil: no key has a ceiling.
	Ceiling *TakeCeiling
	// Leases, with Reserve, is a concurrency cap decided at the take
	// (ARGV[22..24]); nil: none.
	Leases *TakeLeases
	// Pause, with Reserve, is shaper's pause, checked in the take
	// (ARGV[25]): a paused downstream's take moves nothing (TakePaused).
	Pause *TakePause
	// MaxUnits, with Reserve, is the most units of cost a task the take
	// reserves for may have (ARGV[27]): a run of tasks of one cost of more
	// than one unit gets a slot of that many units each; a task of more
	// than MaxUnits is taken without a slot. 0: only unit tasks reserve.
	MaxUnits int64
}

// TakePause names shaper's pause of a downstream: Field of the state
// HASH Key is "1" while it is paused.
type TakePause struct{ Key, Field string }

// TakeLeases is a downstream's cap on calls in flight, decided where the
// take reserves: the take moves no more tasks than the cap has places
// left (concurrency.lua's leases), and gives each task taken with a slot
// a lease, member Token + its id + "|" + its key (LeaseMember), which its
// holder renews and releases as concurrency.lua's.
type TakeLeases struct {
	// Leases and Counts are concurrency.lua's KEYS (keys.Space.Leases,
	// LeaseCounts).
	Leases, Counts string
	// Cap is the most leases in all (0: none, with a KeyCap).
	Cap int64
	// KeyCap is the most leases per admission key (0: none; not with
	// priority lists). In fair order a key at its cap has its parked
	// tasks held (fair.lua's held, prelude_capheld.lua) until one of its
	// calls ends, which releases them (concurrency.lua with CapHeld); in
	// first-in first-out order the take passes over its tasks, which
	// stay in pending where they are.
	KeyCap int64
	// Lease is how long a lease lasts unrenewed (at least 1µs).
	Lease time.Duration
	// Token is unique to the take ("|" not allowed).
	Token string
}

// LeaseMember is the lease a take with l gave task id of key (the
// reply's TakenTask.LeaseKey).
func (l *TakeLeases) LeaseMember(id, key string) string { return l.Token + id + "|" + key }

// argv is ARGV[22..24].
func (l *TakeLeases) argv() []any {
	if l == nil {
		return []any{0, 0, ""}
	}
	return []any{l.Cap, max(l.Lease.Microseconds(), 1), l.Token}
}

// keyCap is ARGV[26].
func (l *TakeLeases) keyCap() int64 {
	if l == nil {
		return 0
	}
	return l.KeyCap
}

// TakeCeiling is a fair downstream's per-key ceiling, decided where the
// take reserves: a key's slots of one unit are at least its interval
// apart across every process, on one tat STRING per key.
type TakeCeiling struct {
	// Prefix is the tat keys' name before the admission key
	// (keys.Space.KeyCeiling(ds, "")).
	Prefix string
	// Interval is each key's interval for one unit; 0: none (a key's
	// operator rate in the fair controls HASH still gives it one).
	Interval time.Duration
	// Rates names the HASH of the keys with an interval of their own, in
	// place of Interval (EnsureKeyRates writes it; "": none); an
	// operator's rate comes first. Fallback is every key's interval
	// while the HASH is missing: the slowest of Interval and the map's.
	Rates    string
	Fallback time.Duration
	// Tolerance stretches an interval by Tolerance per second of it, so
	// that a release late by up to Tolerance keeps the ceiling.
	Tolerance time.Duration
	// Margin is how long a tat key outlives its tat (at least 1ms).
	Margin time.Duration
}

// argv is ARGV[18..21].
func (c *TakeCeiling) argv() []any {
	if c == nil || c.Prefix == "" {
		return []any{0, 0, "", 1}
	}
	spec := strconv.FormatInt(max(c.Interval.Microseconds(), 0), 10)
	if c.Rates != "" {
		spec += "@" + strconv.FormatInt(max(c.Fallback.Microseconds(), 1), 10)
	}
	return []any{spec, max(c.Tolerance.Microseconds(), 0), c.Prefix, max(c.Margin.Milliseconds(), 1)}
}

// TakeStatus says what a take did.
type TakeStatus int64

// The statuses of a take (take.lua's reply field 1).
const (
	TakeTaken  TakeStatus = 0 // at least one task taken
	TakeEmpty  TakeStatus = 1 // pending had no task
	TakePaused TakeStatus = 2 // the queue is paused
	TakeFull   TakeStatus = 3 // the budget of leases is spent
	TakeEarly  TakeStatus = 4 // the next slot starts past the look-ahead
)

// TakeReply is take.lua's reply.
type TakeReply struct {
	// Status says what happened; only TakeTaken moved tasks.
	Status TakeStatus
	// Now is the script's now, µs since the epoch on the Redis clock;
	// with a reservation that ran, the script's end (so slots placed from
	// the reply's arrival are not late by the script's own run time).
	Now int64
	// Next is, for TakeTaken and TakeEarly, when the next slot would start
	// (µs since the epoch): a take succeeds from Next - LookAhead on.
	Next int64
	// Drained is true when pending ran out during the call.
	Drained bool
	// Recovered and Forwarded count the tasks Maintain put back from
	// expired leases and moved from scheduled or retry to pending.
	Recovered, Forwarded int64
	// Reservation is what the reservation of TakeArgs.Reserve found, when
	// it ran (nil without one, or when the take stopped before it: paused,
	// budget spent, pending empty): slot j of Tasks issued units up to
	// Reservation.Issued + (j+1) × cost.
	Reservation *BucketReply
	// Tasks are the tasks taken, in slot order.
	Tasks []TakenTask
}

// TakenTask is one task taken: its id, its encoded asynq TaskMessage
// (empty when the task hash has none), the start of its slot (µs since
// the epoch on the Redis clock) and its priority (3 without priority
// lists).
type TakenTask struct {
	ID       string
	Msg      []byte
	Slot     int64
	Priority int
	// LeaseKey is the key of its lease under a cap per key
	// (TakeLeases.LeaseMember); "" otherwise.
	LeaseKey string
	// Units is the units of cost its slot holds; 0 when the take reserved
	// none for it (its Slot is then the take's now).
	Units int64
	// Left is how many tasks of its key still wait in fair order after
	// it (a backlog: the fair share's Jain index counts such keys); -1
	// when it was not taken from fair order.
	Left int64
}

// takenFields is how many fields of take.lua's reply each task has.
const takenFields = 7

// Take runs take.lua: up to a.Slots tasks, each with its own slot.
func (s *Store) Take(ctx context.Context, a TakeArgs) (TakeReply, error) {
	q := a.Queue
	ks := []string{a.Bucket, q.Pending(), q.Active(), q.Lease(), q.Paused(), q.Scheduled(), q.Retry(), q.Completed()}
	lease := max(int64(a.Lease/time.Second), 1)
	maintain := 0
	if a.Maintain {
		maintain = 1
	}
	if a.Maintained != "" {
		ks = append(ks, a.Maintained)
	}
	levels := 0
	if len(a.Levels) > 0 {
		if len(a.Levels) != 4 || a.Maintained == "" {
			return TakeReply{}, fmt.Errorf("take: priority lists need all four levels and Maintained")
		}
		ks, levels = append(ks, a.Levels...), 1
	}
	weights, err := takeWeights(a)
	if err != nil {
		return TakeReply{}, err
	}
	if weights != "" {
		ks = append(ks, a.Turns)
	}
	fair := 0
	if a.Fair != nil {
		if a.Maintained == "" {
			return TakeReply{}, fmt.Errorf("take: fair order needs Maintained")
		}
		// KEYS[10..14] unused here are filled with the bucket's name (the
		// same hash tag; the script does not touch them)
		for len(ks) < 14 {
			ks = append(ks, a.Bucket)
		}
		f := a.Fair
		ks, fair = append(ks, f.Parked, f.Tags, f.State, f.Later, f.Counts, f.NotBefore, f.Controls, f.Held, f.Pos), 1
	}
	argv := []any{a.Interval, a.Burst, a.LookAhead, max(a.Slots, 1),
		max(a.Budget, 1), lease, q.TaskPrefix(), q.GroupPrefix(), maintain, a.Now,
		max(a.MaintainEvery.Milliseconds(), 1), levels, weights, fair, max(a.FairTTL.Milliseconds(), 1)}
	quotas := 0
	if r := a.Reserve; r != nil {
		if a.Interval != 0 || a.Burst != 0 {
			return TakeReply{}, fmt.Errorf("take: a reservation serves a queue without a rate of its own")
		}
		rr, err := r.checked()
		if err != nil {
			return TakeReply{}, fmt.Errorf("take: %w", err)
		}
		for len(ks) < 23 {
			ks = append(ks, a.Bucket) // unused slots: the same hash tag, not touched
		}
		rks := rr.keys(a.Bucket)
		ks = append(ks, rks...)
		if l := a.Leases; l != nil {
			if l.Cap < 0 || l.KeyCap < 0 || l.Cap+l.KeyCap < 1 || l.Leases == "" || l.Counts == "" || strings.Contains(l.Token, "|") {
				return TakeReply{}, fmt.Errorf("take: leases need a cap of at least 1, both keys and a token without '|'")
			}
			ks = append(ks, l.Leases, l.Counts)
		} else {
			ks = append(ks, a.Bucket, a.Bucket) // unused: the same hash tag, not touched
		}
		field := ""
		if p := a.Pause; p != nil && p.Key != "" {
			ks, field = append(ks, p.Key), p.Field
		}
		if c := a.Ceiling; c != nil && c.Prefix != "" && c.Rates != "" {
			if field == "" {
				ks = append(ks, a.Bucket) // no pause: the same hash tag, not read
			}
			ks = append(ks, c.Rates)
		}
		argv = append(append(append(append(argv, len(rks), max(a.Lead, 0)), a.Ceiling.argv()...), a.Leases.argv()...),
			field, a.Leases.keyCap(), max(a.MaxUnits, 0))
		argv = append(argv, rr.argv(modeCharge)...)
		quotas = len(rr.Quotas)
	}
	v, err := takeScript.Run(ctx, s.rdb, ks, argv...).Slice()
	if err != nil {
		return TakeReply{}, fmt.Errorf("take: %w", err)
	}
	return parseTake(v, quotas)
}

// takeWeights is ARGV[13] for a: "w1 w2 w3 w4 w5", or "" for strict
// priority.
func takeWeights(a TakeArgs) (string, error) {
	if a.Weights.Strict() {
		return "", nil
	}
	if err := a.Weights.Validate(); err != nil {
		return "", fmt.Errorf("take: %w", err)
	}
	if len(a.Levels) == 0 || a.Turns == "" {
		return "", fmt.Errorf("take: weights need the priority lists and Turns")
	}
	ws := make([]string, len(a.Weights))
	for i, w := range a.Weights {
		ws[i] = strconv.Itoa(w)
	}
	return strings.Join(ws, " "), nil
}

// parseTake reads take.lua's reply; quotas is how many quotas the
// reservation, if any, checked.
func parseTake(v []any, quotas int) (TakeReply, error) {
	if len(v) < 7 {
		return TakeReply{}, fmt.Errorf("take: reply has %d fields", len(v))
	}
	var h [7]int64
	for i := range h {
		n, ok := v[i].(int64)
		if !ok {
			return TakeReply{}, fmt.Errorf("take: reply field %d is %T, want an integer", i+1, v[i])
		}
		h[i] = n
	}
	r := TakeReply{Status: TakeStatus(h[0]), Now: h[1], Next: h[2], Drained: h[3] == 1,
		Recovered: h[4], Forwarded: h[5]}
	nres := int(h[6])
	if nres < 0 || len(v) < 7+nres || (len(v)-7-nres)%takenFields != 0 || nres > 0 && nres != 8+2*quotas {
		return TakeReply{}, fmt.Errorf("take: reply has %d fields with %d of a reservation", len(v), nres)
	}
	if nres > 0 {
		rv := make([]int64, nres)
		for i := range rv {
			n, ok := v[7+i].(int64)
			if !ok {
				return TakeReply{}, fmt.Errorf("take: reservation field %d is %T, want an integer", i+1, v[7+i])
			}
			rv[i] = n
		}
		res := bucketReply(rv, quotas)
		r.Reservation = &res
	}
	for i := 7 + nres; i < len(v); i += takenFields {
		id, ok1 := v[i].(string)
		msg, ok2 := v[i+1].(string)
		slot, ok3 := v[i+2].(int64)
		prio, ok4 := v[i+3].(int64)
		key, ok5 := v[i+4].(string)
		units, ok6 := v[i+5].(int64)
		left, ok7 := v[i+6].(int64)
		if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || !ok7 {
			return TakeReply{}, fmt.Errorf("take: task %d of the reply is malformed", (i-7-nres)/takenFields+1)
		}
		r.Tasks = append(r.Tasks, TakenTask{ID: id, Msg: []byte(msg), Slot: slot, Priority: int(prio), LeaseKey: key, Units: units, Left: left})
	}
	return r, nil
}

// TakeDoneArgs finish a task that succeeded (take_done.lua).
type TakeDoneArgs struct {
	Queue keys.AsynqQueue
	ID    string
	// Day is the day whose processed counter counts the task (asynq names
	// it by the finishing process's clock, in UTC); it is also the now of
	// the retention and of the counter's expiry, as asynq's.
	Day time.Time
	// Retention keeps the task as completed for this long; 0 deletes it.
	Retention time.Duration
	// Msg is the message with completed_at set; used only with Retention.
	Msg []byte
	// UniqueKey is the message's unique_key; its lock is released when it
	// still holds ID. Empty: none.
	UniqueKey string
}

// TakeDone finishes a task that succeeded, as asynq's Done or
// MarkAsComplete. It reports false when the task was not active any more
// (nothing written).
func (s *Store) TakeDone(ctx context.Context, a TakeDoneArgs) (bool, error) {
	q := a.Queue
	ks := []string{q.Active(), q.Lease(), q.Task(a.ID), q.Processed(a.Day), q.ProcessedTotal(), q.Completed()}
	if a.UniqueKey != "" {
		ks = append(ks, a.UniqueKey)
	}
	ret := int64(a.Retention / time.Second)
	n, err := takeDone.Run(ctx, s.rdb, ks, a.ID, ret, a.Msg, maxInt64Field, a.Day.Unix()).Int64()
	if err != nil {
		return false, fmt.Errorf("take: done %s: %w", a.ID, err)
	}
	return n == 1, nil
}

// TakeFailArgs finish a task that failed (take_fail.lua).
type TakeFailArgs struct {
	Queue keys.AsynqQueue
	ID    string
	// Day is the day whose processed and failed counters count the task,
	// and the now of the retry and the archive (as TakeDoneArgs.Day).
	Day time.Time
	// Msg is the message rewritten with error_msg, last_failed_at and, for
	// a retry that counts, retried+1.
	Msg []byte
	// Archive moves the task to archived; else to retry after RetryIn.
	Archive bool
	// RetryIn is how long until the retry (whole seconds, as asynq).
	RetryIn time.Duration
	// Failure counts the failure in the processed and failed counters
	// (asynq's isFailure); an archive always counts.
	Failure bool
}

// TakeFail finishes a task that failed, as asynq's Retry or Archive. It
// reports false when the task was not active any more (nothing written).
func (s *Store) TakeFail(ctx context.Context, a TakeFailArgs) (bool, error) {
	q := a.Queue
	dest, mode := q.Retry(), 0
	if a.Archive {
		dest, mode = q.Archived(), 1
	}
	ks := []string{q.Task(a.ID), q.Active(), q.Lease(), dest, q.Processed(a.Day), q.Failed(a.Day),
		q.ProcessedTotal(), q.FailedTotal(), q.TaskPrefix()}
	failure := 0
	if a.Failure {
		failure = 1
	}
	n, err := takeFail.Run(ctx, s.rdb, ks, a.ID, a.Msg, mode, int64(a.RetryIn/time.Second), failure,
		maxInt64Field, a.Day.Unix()).Int64()
	if err != nil {
		return false, fmt.Errorf("take: fail %s: %w", a.ID, err)
	}
	return n == 1, nil
}

// TakeRequeue gives back tasks that were taken but never started: each to
// the head of pending (or of its priority list, with levels: the four
// lists of TakeArgs.Levels), no attempt consumed, in the order given (the
// first id given is taken again first). It returns how many were still
// active.
func (s *Store) TakeRequeue(ctx context.Context, q keys.AsynqQueue, levels []string, ids ...string) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[len(ids)-1-i] = id // the script pushes each to the head: last pushed is next
	}
	ks := append([]string{q.Active(), q.Lease(), q.Pending(), q.TaskPrefix()}, levels...)
	n, err := takeRequeue.Run(ctx, s.rdb, ks, args...).Int64()
	if err != nil {
		return 0, fmt.Errorf("take: requeue: %w", err)
	}
	return n, nil
}

// TakeHoldArgs give back a task of a fair downstream whose admission key
// was paused before its call started (take_hold.lua).
type TakeHoldArgs struct {
	Queue keys.AsynqQueue
	Fair  keys.FairKeys
	ID    string
	// Key, Cost and Weight are the task's admission key, its cost and the
	// key's weight, as fair.lua's park records them.
	Key    string
	Cost   int64
	Weight float64
	// TTL is the fair keys' TTL.
	TTL time.Duration
	// Again: its slot was wasted, and it goes back to parked, first in
	// fair order; else its key is paused, and it goes to held.
	Again bool
}

// TakeHold moves a taken task whose call never started from active back
// to fair order (take_hold.lua): to the held set (its key paused) or,
// with Again, first in parked (its slot wasted), waiting in asynq's
// pending list as a parked task does, no attempt consumed. It reports
// false when the task was not active any more (nothing written).
func (s *Store) TakeHold(ctx context.Context, a TakeHoldArgs) (bool, error) {
	q := a.Queue
	dest, where := a.Fair.Held, "held"
	if a.Again {
		dest, where = a.Fair.Parked, "parked"
	}
	ks := []string{q.Active(), q.Lease(), q.Pending(), q.TaskPrefix() + a.ID, a.Fair.State, a.Fair.Counts, dest, a.Fair.Pos}
	n, err := takeHold.Run(ctx, s.rdb, ks, a.ID, a.Key, max(a.Cost, 1), strconv.FormatFloat(a.Weight, 'g', -1, 64),
		max(a.TTL.Milliseconds(), 1), where).Int64()
	if err != nil {
		return false, fmt.Errorf("take: hold: %w", err)
	}
	return n == 1, nil
}

// TakeExtend extends the leases of ids by lease on the Redis clock. It
// returns the new expiry and, per id, whether its lease still existed.
func (s *Store) TakeExtend(ctx context.Context, q keys.AsynqQueue, lease time.Duration, ids ...string) (time.Time, []bool, error) {
	args := []any{max(int64(lease/time.Second), 1)}
	for _, id := range ids {
		args = append(args, id)
	}
	v, err := s.ints(ctx, takeExtend, []string{q.Lease()}, 1+len(ids), args...)
	if err != nil {
		return time.Time{}, nil, fmt.Errorf("take: extend: %w", err)
	}
	held := make([]bool, len(ids))
	for i := range ids {
		held[i] = v[1+i] == 1
	}
	return time.Unix(v[0], 0), held, nil
}
