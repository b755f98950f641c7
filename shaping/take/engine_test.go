package take

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/shaper-io/shaper/internal/redistest"
)

// TestTakeEngineRate: tasks of asynq's Client, served by two engines (two
// processes' worth) at 40/s, are each delivered once, never more than
// rate·1s + 1 in any second, and asynq counts them processed.
func TestTakeEngineRate(t *testing.T) {
	r := newRig(t)
	const n, rate = 80, 40
	ids := r.enqueue("d", "job", n)
	rec := newRecorder()
	d := Downstream{Name: "d", Rate: rate, InFlight: 8, Handler: func(ctx context.Context, t *Task) error {
		rec.add(t.ID)
		return nil
	}}
	e1 := r.engine(redistest.Client(t), Config{}, d)
	e2 := r.engine(redistest.Client(t), Config{}, d)
	start(t, e1)
	start(t, e2)
	waitFor(t, 10*time.Second, "every task processed", func() bool { return r.queueInfo("d").Processed == n })
	if got := rec.maxInWindow(time.Second); got > rate+1 {
		t.Errorf("max releases in 1s: got %d, want at most %d", got, rate+1)
	}
	for _, id := range ids {
		if rec.count[id] != 1 {
			t.Errorf("task %s delivered %d times, want 1", id, rec.count[id])
		}
	}
	qi := r.queueInfo("d")
	if qi.Pending != 0 || qi.Active != 0 || qi.Failed != 0 {
		t.Errorf("queue after: pending %d active %d failed %d, want 0 0 0", qi.Pending, qi.Active, qi.Failed)
	}
	s1, s2 := e1.Stats(), e2.Stats()
	if s1.Done+s2.Done != n || s1.Taken == 0 || s2.Taken == 0 {
		t.Errorf("stats: %+v and %+v, want %d done over both engines, each taking some", s1, s2, n)
	}
	t.Logf("takes %d for %d releases (%.2f per release)", s1.Takes+s2.Takes, n, float64(s1.Takes+s2.Takes)/n)
}

// sampleActive reads asynq's active list of ds for d and returns its
// largest length.
func (r *rig) sampleActive(ds string, d time.Duration) int64 {
	var most int64
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Millisecond) { // sampling interval
		most = max(most, r.rdb.LLen(context.Background(), r.sp.Asynq(ds).Active()).Val())
	}
	return most
}

// TestTakeEngineHoldsOnlyLookAhead: throttled at 10/s with a budget of 100
// and instant calls, asynq's active list never holds more than the
// look-ahead's slots (2) plus the call in progress; paused, it empties
// within the look-ahead and stays empty.
func TestTakeEngineHoldsOnlyLookAhead(t *testing.T) {
	r := newRig(t)
	r.enqueue("d", "job", 200)
	rec := newRecorder()
	d := Downstream{Name: "d", Rate: 10, InFlight: 100, Handler: func(ctx context.Context, t *Task) error {
		rec.add(t.ID)
		return nil
	}}
	start(t, r.engine(nil, Config{}, d))
	waitFor(t, 5*time.Second, "the first release", func() bool { return rec.calls() > 0 })
	if most := r.sampleActive("d", 1500*time.Millisecond); most > 3 {
		t.Errorf("throttled: active reached %d, want at most 3 (look-ahead slots + the call)", most)
	}
	if err := r.insp.PauseQueue(r.sp.Queue("d")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "no active task while paused", func() bool { return r.queueInfo("d").Active == 0 })
	before := rec.calls()
	if most := r.sampleActive("d", 1200*time.Millisecond); most != 0 {
		t.Errorf("paused: active reached %d, want 0", most)
	}
	if got := rec.calls(); got != before {
		t.Errorf("paused: %d releases, want none", got-before)
	}
}

// TestTakeEngineBudget: with slow calls, a budget of 3 leases across two
// engines caps asynq's active list at 3.
func TestTakeEngineBudget(t *testing.T) {
	r := newRig(t)
	r.enqueue("d", "job", 30)
	d := Downstream{Name: "d", Rate: 200, InFlight: 3, Handler: func(ctx context.Context, t *Task) error {
		time.Sleep(50 * time.Millisecond) // a slow downstream
		return nil
	}}
	start(t, r.engine(redistest.Client(t), Config{}, d))
	start(t, r.engine(redistest.Client(t), Config{}, d))
	if most := r.sampleActive("d", time.Second); most > 3 || most == 0 {
		t.Errorf("active reached %d, want 1..3", most)
	}
}

// TestTakeEngineRetryArchive: failures show in asynq's Inspector as asynq's
// processor would leave them: a retry with retried 1 and the error, an
// archive once retries are spent or on SkipRetry, and the failed counters.
func TestTakeEngineRetryArchive(t *testing.T) {
	r := newRig(t)
	later := r.enqueue("d", "later", 1, asynq.MaxRetry(5))[0]
	spent := r.enqueue("d", "spent", 1, asynq.MaxRetry(1))[0]
	skip := r.enqueue("d", "skip", 1, asynq.MaxRetry(5))[0]
	d := Downstream{Name: "d", Rate: 100, InFlight: 4,
		Handler: func(ctx context.Context, t *Task) error {
			if t.Type == "skip" {
				return fmt.Errorf("bad input: %w", asynq.SkipRetry)
			}
			return fmt.Errorf("boom %d", t.Retried)
		},
		RetryDelay: func(n int, err error, t *Task) time.Duration {
			if t.Type == "later" {
				return time.Hour
			}
			return 0
		}}
	start(t, r.engine(nil, Config{}, d))
	q := r.sp.Queue("d")
	waitFor(t, 5*time.Second, "two archived, one retry", func() bool {
		qi := r.queueInfo("d")
		return qi.Archived == 2 && qi.Retry == 1
	})
	cases := []struct {
		id      string
		state   asynq.TaskState
		retried int
		err     string
	}{
		{later, asynq.TaskStateRetry, 1, "boom 0"},
		{spent, asynq.TaskStateArchived, 1, "boom 1"},
		{skip, asynq.TaskStateArchived, 0, "bad input: skip retry for the task"},
	}
	for _, c := range cases {
		info, err := r.insp.GetTaskInfo(q, c.id)
		if err != nil {
			t.Fatal(err)
		}
		if info.State != c.state || info.Retried != c.retried || info.LastErr != c.err || info.LastFailedAt.IsZero() {
			t.Errorf("%s: got state %v retried %d err %q failed at %v, want %v %d %q", info.Type, info.State, info.Retried,
				info.LastErr, info.LastFailedAt, c.state, c.retried, c.err)
		}
	}
	if info, _ := r.insp.GetTaskInfo(q, later); time.Until(info.NextProcessAt) < 59*time.Minute {
		t.Errorf("retry at %v, want in about 1h", info.NextProcessAt)
	}
	if qi := r.queueInfo("d"); qi.Failed != 4 || qi.Processed != 4 || qi.Active != 0 {
		t.Errorf("counters: failed %d processed %d active %d, want 4 4 0 (one failure before each of 4 outcomes)",
			qi.Failed, qi.Processed, qi.Active)
	}
}

// TestTakeEngineDoneRetentionUnique: a task with a retention is kept as
// completed; a unique task's lock is released when it is done.
func TestTakeEngineDoneRetentionUnique(t *testing.T) {
	r := newRig(t)
	kept := r.enqueue("d", "kept", 1, asynq.Retention(time.Hour))[0]
	r.enqueue("d", "uniq", 1, asynq.Unique(time.Hour))
	d := Downstream{Name: "d", Rate: 100, InFlight: 2, Handler: func(ctx context.Context, t *Task) error { return nil }}
	start(t, r.engine(nil, Config{}, d))
	waitFor(t, 5*time.Second, "both processed", func() bool { return r.queueInfo("d").Processed == 2 })
	info, err := r.insp.GetTaskInfo(r.sp.Queue("d"), kept)
	if err != nil || info.State != asynq.TaskStateCompleted || info.CompletedAt.IsZero() {
		t.Errorf("retained task: got %+v, %v; want completed with its time", info, err)
	}
	if _, err := r.cl.Enqueue(asynq.NewTask("uniq", []byte{0, 0}), asynq.Queue(r.sp.Queue("d")), asynq.Unique(time.Hour)); err != nil {
		t.Errorf("the unique lock was not released: %v", err)
	}
}

// TestTakeEngineMalformed: a task whose message cannot be read is archived
// with the reason, visible in asynq's Inspector; the others are delivered.
func TestTakeEngineMalformed(t *testing.T) {
	r := newRig(t)
	ids := r.enqueue("d", "job", 3)
	ctx := context.Background()
	if err := r.rdb.HSet(ctx, r.sp.Asynq("d").Task(ids[1]), "msg", "\xff\xff\xff").Err(); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	d := Downstream{Name: "d", Rate: 100, InFlight: 2, Handler: func(ctx context.Context, t *Task) error {
		rec.add(t.ID)
		return nil
	}}
	start(t, r.engine(nil, Config{}, d))
	waitFor(t, 5*time.Second, "two done, one archived", func() bool {
		qi := r.queueInfo("d")
		return qi.Archived == 1 && rec.calls() == 2
	})
	info, err := r.insp.GetTaskInfo(r.sp.Queue("d"), ids[1])
	if err != nil || info.State != asynq.TaskStateArchived || !strings.Contains(info.LastErr, "malformed") {
		t.Errorf("malformed task: got %+v, %v; want archived with the reason", info, err)
	}
}

// TestTakeEngineShutdownRequeues: tasks taken ahead of their slot go back
// to pending at shutdown, no attempt consumed.
func TestTakeEngineShutdownRequeues(t *testing.T) {
	r := newRig(t)
	ids := r.enqueue("d", "job", 10)
	rec := newRecorder()
	d := Downstream{Name: "d", Rate: 4, InFlight: 10, Handler: func(ctx context.Context, t *Task) error {
		rec.add(t.ID)
		return nil
	}}
	e := r.engine(nil, Config{LookAhead: 2 * time.Second}, d)
	stop := start(t, e)
	waitFor(t, 5*time.Second, "tasks taken ahead", func() bool { return r.queueInfo("d").Active >= 5 })
	stop()
	qi := r.queueInfo("d")
	if qi.Active != 0 || int(qi.Pending) != len(ids)-rec.calls() {
		t.Errorf("after shutdown: active %d pending %d with %d delivered, want 0 and %d", qi.Active, qi.Pending,
			rec.calls(), len(ids)-rec.calls())
	}
	tasks, err := r.insp.ListPendingTasks(r.sp.Queue("d"))
	if err != nil {
		t.Fatal(err)
	}
	for i, ti := range tasks {
		if ti.Retried != 0 || ti.State != asynq.TaskStatePending {
			t.Errorf("requeued %s: state %v retried %d, want pending, 0", ti.ID, ti.State, ti.Retried)
		}
		if want := ids[rec.calls()+i]; ti.ID != want {
			t.Errorf("pending[%d] is %s, want %s (order kept)", i, ti.ID, want)
		}
	}
}

// TestTakeEngineCrashRecovery: an engine that dies holding tasks (its
// Redis connection gone, nothing finished or extended) strands them only
// until their lease expires; another engine then delivers every task
// exactly once.
func TestTakeEngineCrashRecovery(t *testing.T) {
	r := newRig(t)
	ids := r.enqueue("d", "job", 20)
	release := make(chan struct{})
	defer close(release)
	took := newRecorder()
	dead := redistest.Client(t)
	crashing := Downstream{Name: "d", Rate: 100, InFlight: 5, Handler: func(ctx context.Context, t *Task) error {
		took.add(t.ID)
		select { // hangs like a process that stopped; returns only when cut
		case <-ctx.Done():
		case <-release:
		}
		return ctx.Err()
	}}
	stopA := start(t, r.engine(dead, Config{Lease: 2 * time.Second, ShutdownTimeout: 50 * time.Millisecond}, crashing))
	waitFor(t, 5*time.Second, "the budget taken", func() bool { return took.calls() == 5 })
	dead.Close() // from here A writes nothing: no finish, no extension, no requeue
	stopA()
	if qi := r.queueInfo("d"); qi.Active != 5 {
		t.Fatalf("after the crash: active %d, want 5 stranded", qi.Active)
	}
	rec := newRecorder()
	d := crashing
	d.Handler = func(ctx context.Context, t *Task) error {
		rec.add(t.ID)
		return nil
	}
	eB := r.engine(nil, Config{Lease: 2 * time.Second}, d)
	start(t, eB)
	waitFor(t, 10*time.Second, "every task processed", func() bool { return r.queueInfo("d").Processed == 20 })
	for _, id := range ids {
		if rec.count[id] != 1 {
			t.Errorf("task %s delivered %d times by the survivor, want 1", id, rec.count[id])
		}
	}
	if s := eB.Stats(); s.Recovered != 5 {
		t.Errorf("recovered %d, want the 5 stranded", s.Recovered)
	}
	if qi := r.queueInfo("d"); qi.Active != 0 || qi.Pending != 0 || qi.Retry != 0 {
		t.Errorf("after: active %d pending %d retry %d, want 0", qi.Active, qi.Pending, qi.Retry)
	}
}

// TestTakeEngineConfig: a setting out of range names its field.
func TestTakeEngineConfig(t *testing.T) {
	r := newRig(t)
	if _, err := New(Config{}); err == nil || !strings.Contains(err.Error(), "Config.Redis") {
		t.Errorf("no Redis: got %v", err)
	}
	e := r.engine(nil, Config{})
	for _, c := range []struct {
		d    Downstream
		want string
	}{
		{Downstream{Name: "a b", Handler: func(context.Context, *Task) error { return nil }}, "Downstream.Name"},
		{Downstream{Name: "a"}, "Downstream.Handler"},
		{Downstream{Name: "a", Rate: -1, Handler: func(context.Context, *Task) error { return nil }}, "Downstream.Rate"},
	} {
		if err := e.Add(c.d); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Add(%+v): got %v, want an error naming %s", c.d.Name, err, c.want)
		}
	}
	ok := Downstream{Name: "a", Handler: func(context.Context, *Task) error { return nil }}
	if err := e.Add(ok); err != nil {
		t.Fatal(err)
	}
	if err := e.Add(ok); err == nil {
		t.Error("adding a downstream twice: got no error")
	}
}

// TestTakeEngineWake: an idle downstream checked only every 5s or more
// (one slot at 0.2/s) takes at once when a producer in the process wakes
// it.
func TestTakeEngineWake(t *testing.T) {
	r := newRig(t)
	rec := newRecorder()
	d := Downstream{Name: "d", Rate: 0.2, Handler: func(ctx context.Context, t *Task) error {
		rec.add(t.ID)
		return nil
	}}
	e := r.engine(nil, Config{IdlePoll: 10 * time.Second, Maintain: time.Minute}, d)
	start(t, e)
	waitFor(t, 5*time.Second, "the first idle check", func() bool { return e.Stats().Takes > 0 })
	r.enqueue("d", "job", 1)
	e.Wake("d")
	waitFor(t, 2*time.Second, "the woken release", func() bool { return rec.calls() == 1 })
}

// TestTakeEngineTimeout: a call that outlives the task's asynq Timeout has
// its context cut and is retried with the deadline as its error.
func TestTakeEngineTimeout(t *testing.T) {
	r := newRig(t)
	id := r.enqueue("d", "slow", 1, asynq.Timeout(time.Second), asynq.MaxRetry(3))[0]
	d := Downstream{Name: "d", Rate: 100, Handler: func(ctx context.Context, t *Task) error {
		<-ctx.Done()
		return ctx.Err()
	}, RetryDelay: func(int, error, *Task) time.Duration { return time.Hour }}
	start(t, r.engine(nil, Config{}, d))
	waitFor(t, 5*time.Second, "the retry", func() bool { return r.queueInfo("d").Retry == 1 })
	info, err := r.insp.GetTaskInfo(r.sp.Queue("d"), id)
	if err != nil || info.Retried != 1 || info.LastErr != context.DeadlineExceeded.Error() {
		t.Errorf("got %+v, %v; want retried 1 with %q", info, err, context.DeadlineExceeded)
	}
}

// TestTakeEngineLeaseExtended: a call longer than the lease keeps its task,
// because the engine extends the lease; a second engine recovering leases
// every 200ms never takes it.
func TestTakeEngineLeaseExtended(t *testing.T) {
	r := newRig(t)
	r.enqueue("d", "long", 1)
	rec := newRecorder()
	d := Downstream{Name: "d", Rate: 100, InFlight: 2, Handler: func(ctx context.Context, t *Task) error {
		rec.add(t.ID)
		if rec.calls() == 1 {
			time.Sleep(3500 * time.Millisecond) // a call outliving the 2s lease
		}
		return nil
	}}
	e1 := r.engine(redistest.Client(t), Config{Lease: 2 * time.Second}, d)
	e2 := r.engine(redistest.Client(t), Config{Lease: 2 * time.Second}, d)
	start(t, e1)
	start(t, e2)
	waitFor(t, 10*time.Second, "the long call done", func() bool { return r.queueInfo("d").Processed == 1 })
	if got := rec.calls(); got != 1 {
		t.Errorf("delivered %d times, want 1", got)
	}
	if s1, s2 := e1.Stats(), e2.Stats(); s1.Recovered+s2.Recovered != 0 || s1.Lost+s2.Lost != 0 {
		t.Errorf("recovered %d lost %d, want 0 0", s1.Recovered+s2.Recovered, s1.Lost+s2.Lost)
	}
}

// TestTakeEngineLateSkip: a job woken past its slot's tolerance (here every
// job: 1ns) wastes the slot and gives its task back with no attempt
// consumed; the handler is never called late.
func TestTakeEngineLateSkip(t *testing.T) {
	r := newRig(t)
	id := r.enqueue("d", "job", 1)[0]
	rec := newRecorder()
	d := Downstream{Name: "d", Rate: 20, LateTolerance: time.Nanosecond, Handler: func(ctx context.Context, t *Task) error {
		rec.add(t.ID)
		return nil
	}}
	e := r.engine(nil, Config{}, d)
	stop := start(t, e)
	waitFor(t, 5*time.Second, "three late skips", func() bool { return e.Stats().LateSkips >= 3 })
	stop()
	if rec.calls() != 0 {
		t.Errorf("handler called %d times late, want 0", rec.calls())
	}
	info, err := r.insp.GetTaskInfo(r.sp.Queue("d"), id)
	if err != nil || info.State != asynq.TaskStatePending || info.Retried != 0 {
		t.Errorf("after: got %+v, %v; want pending, retried 0", info, err)
	}
}

// TestTakeEngineGateAndRequeue: while a downstream's Gate is closed
// nothing leaves pending; a Wake asks it again at once; a handler that
// answers ErrRequeue puts its task back with no attempt consumed, and the
// next call delivers it.
func TestTakeEngineGateAndRequeue(t *testing.T) {
	r := newRig(t)
	ids := r.enqueue("d", "job", 5)
	var open atomic.Bool
	rec := newRecorder()
	var refused sync.Map
	d := Downstream{Name: "d", InFlight: 5,
		Gate: func(now time.Time) time.Time {
			if open.Load() {
				return time.Time{}
			}
			return now.Add(time.Hour) // only a Wake asks again
		},
		Handler: func(ctx context.Context, t *Task) error {
			if _, again := refused.LoadOrStore(t.ID, true); !again {
				return fmt.Errorf("not yet: %w", ErrRequeue)
			}
			if t.Retried != 0 {
				return fmt.Errorf("task %s: %d attempts consumed, want 0", t.ID, t.Retried)
			}
			rec.add(t.ID)
			return nil
		}}
	e := r.engine(nil, Config{}, d)
	start(t, e)
	if most := r.sampleActive("d", 300*time.Millisecond); most != 0 {
		t.Fatalf("gate closed: active reached %d, want 0", most)
	}
	if qi := r.queueInfo("d"); qi.Pending != 5 {
		t.Fatalf("gate closed: %d pending, want 5", qi.Pending)
	}
	open.Store(true)
	e.Wake("d")
	waitFor(t, 5*time.Second, "every task processed", func() bool { return r.queueInfo("d").Processed == 5 })
	for _, id := range ids {
		if rec.count[id] != 1 {
			t.Errorf("task %s delivered %d times, want 1", id, rec.count[id])
		}
	}
	// a job woken past its slot's tolerance (a loaded machine) is given
	// back too, as a late skip: those are not the handler's
	if s := e.Stats(); s.Requeued-s.LateSkips != 5 || s.Retried != 0 {
		t.Errorf("stats %+v: want 5 requeued besides late skips, 0 retried", s)
	}
}

// TestTakeEngineJanitor: a completed task is deleted once its retention
// has passed (asynq's janitor runs only inside an asynq.Server, so the
// engine's maintenance does its work).
func TestTakeEngineJanitor(t *testing.T) {
	r := newRig(t)
	id := r.enqueue("d", "kept", 1, asynq.Retention(time.Second))[0]
	d := Downstream{Name: "d", Rate: 100, InFlight: 1, Handler: func(ctx context.Context, t *Task) error { return nil }}
	start(t, r.engine(nil, Config{}, d))
	ctx := context.Background()
	q := r.sp.Asynq("d")
	waitFor(t, 5*time.Second, "the task completed", func() bool { return r.rdb.ZCard(ctx, q.Completed()).Val() == 1 })
	waitFor(t, 10*time.Second, "the completed task deleted after its retention", func() bool {
		return r.rdb.ZCard(ctx, q.Completed()).Val() == 0 && r.rdb.Exists(ctx, q.Task(id)).Val() == 0
	})
}

// TestTakeEngineRetaken: a task taken again while the job that took it
// first still waits for its slot (here its lease was lost and it went
// back to pending) is called once, by the new job; the old job is dropped
// (Stats.Retaken), and the shutdown does not wait for it.
func TestTakeEngineRetaken(t *testing.T) {
	r := newRig(t)
	ids := r.enqueue("d", "job", 8)
	rec := newRecorder()
	d := Downstream{Name: "d", Rate: 2, InFlight: 10, Handler: func(ctx context.Context, t *Task) error {
		rec.add(t.ID)
		return nil
	}}
	e := r.engine(nil, Config{LookAhead: 3 * time.Second}, d)
	stop := start(t, e)
	ctx := context.Background()
	q := r.sp.Asynq("d")
	waitFor(t, 5*time.Second, "tasks taken ahead", func() bool { return r.queueInfo("d").Active >= 5 })
	// the last taken, its slot seconds ahead: its lease is lost and it is
	// back at the front of pending
	last := r.rdb.LIndex(ctx, q.Active(), 0).Val()
	r.rdb.LRem(ctx, q.Active(), 1, last)
	r.rdb.ZRem(ctx, q.Lease(), last)
	r.rdb.HSet(ctx, q.Task(last), "state", "pending")
	r.rdb.RPush(ctx, q.Pending(), last)
	waitFor(t, 10*time.Second, "the task taken again", func() bool { return e.Stats().Retaken == 1 })
	waitFor(t, 15*time.Second, "every task called", func() bool { return rec.calls() >= len(ids) })
	stop()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, id := range ids {
		if n := rec.count[id]; n != 1 {
			t.Errorf("task %s called %d times, want 1", id, n)
		}
	}
}
