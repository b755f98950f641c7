package lua_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/redistest"
)

// takeRig is one downstream's asynq queue with tasks enqueued by the real
// asynq.Client, and take.lua's arguments for it.
type takeRig struct {
	t   *testing.T
	rdb redis.UniversalClient
	st  *lua.Store
	sp  keys.Space
	q   keys.AsynqQueue
	a   lua.TakeArgs
	ids []string // enqueued, in order
}

func newTakeRig(t *testing.T, n int) *takeRig {
	rdb := redistest.Client(t)
	sp := keys.New(redistest.Prefix(t))
	r := &takeRig{t: t, rdb: rdb, st: lua.New(rdb), sp: sp, q: sp.Asynq("d1"),
		a: lua.TakeArgs{Bucket: sp.Bucket("d1"), Queue: sp.Asynq("d1"), Interval: 100000,
			LookAhead: 150000, Slots: 10, Budget: 3, Lease: 30 * time.Second}}
	cl := asynq.NewClientFromRedisClient(rdb)
	for i := range n {
		info, err := cl.Enqueue(asynq.NewTask("job", []byte(fmt.Sprint(i))), asynq.Queue(sp.Queue("d1")))
		if err != nil {
			t.Fatal(err)
		}
		r.ids = append(r.ids, info.ID)
	}
	return r
}

func (r *takeRig) take(now int64, maintain bool) lua.TakeReply {
	r.t.Helper()
	a := r.a
	a.Now, a.Maintain = now, maintain
	if a.Reserve != nil {
		ra := *a.Reserve
		ra.Now = now
		a.Reserve = &ra
	}
	rep, err := r.st.Take(context.Background(), a)
	if err != nil {
		r.t.Fatal(err)
	}
	return rep
}

func (r *takeRig) lens() (pending, active, lease int64) {
	ctx := context.Background()
	return r.rdb.LLen(ctx, r.q.Pending()).Val(), r.rdb.LLen(ctx, r.q.Active()).Val(), r.rdb.ZCard(ctx, r.q.Lease()).Val()
}

// TestTakeSteps walks take.lua through its statuses on an explicit clock:
// slots 100ms apart, a 150ms look-ahead, a budget of 3 leases.
func TestTakeSteps(t *testing.T) {
	r := newTakeRig(t, 5)
	t0 := time.Now().Truncate(time.Second).UnixMicro()
	steps := []struct {
		at       int64 // µs after t0
		status   lua.TakeStatus
		slots    []int64 // µs after t0
		next     int64   // µs after t0: the next slot, when taken or early
		pActive  int64   // active after the step
		pPending int64
	}{
		{0, lua.TakeTaken, []int64{0, 100000}, 200000, 2, 3},
		{10000, lua.TakeEarly, nil, 200000, 2, 3},
		{60000, lua.TakeTaken, []int64{200000}, 300000, 3, 2},
		{160000, lua.TakeFull, nil, 0, 3, 2},
	}
	var taken []string
	for i, s := range steps {
		rep := r.take(t0+s.at, false)
		var slots []int64
		for _, tt := range rep.Tasks {
			slots = append(slots, tt.Slot-t0)
			taken = append(taken, tt.ID)
			if len(tt.Msg) == 0 {
				t.Errorf("step %d: task %s has no msg", i, tt.ID)
			}
		}
		next := rep.Next
		if next != 0 {
			next -= t0
		}
		_, active, lease := r.lens()
		pending, _, _ := r.lens()
		if rep.Status != s.status || fmt.Sprint(slots) != fmt.Sprint(s.slots) || next != s.next ||
			active != s.pActive || lease != s.pActive || pending != s.pPending {
			t.Errorf("step %d: got status %d slots %v next %d active %d lease %d pending %d, want %d %v %d %d %d %d",
				i, rep.Status, slots, next, active, lease, pending, s.status, s.slots, s.next, s.pActive, s.pActive, s.pPending)
		}
	}
	if fmt.Sprint(taken) != fmt.Sprint(r.ids[:3]) {
		t.Errorf("taken %v, want the first enqueued %v (FIFO)", taken, r.ids[:3])
	}
	n, err := r.st.TakeRequeue(context.Background(), r.q, nil, taken...)
	if err != nil || n != 3 {
		t.Fatalf("requeue: got %d, %v; want 3", n, err)
	}
	// The budget is free again but the bucket is not: the next slot is
	// t0+300ms, so a take at t0+140ms is early, one at t0+260ms takes the
	// first task requeued at +300ms and the next at +400ms.
	if rep := r.take(t0+140000, false); rep.Status != lua.TakeEarly {
		t.Errorf("after requeue: got status %d, want early", rep.Status)
	}
	rep := r.take(t0+260000, false)
	if len(rep.Tasks) != 2 || rep.Tasks[0].ID != r.ids[0] || rep.Tasks[0].Slot != t0+300000 {
		t.Errorf("after requeue: got %+v, want %s first at slot +300ms", rep.Tasks, r.ids[0])
	}
}

// TestTakePausedAndEmpty: a paused queue moves nothing; an empty one says
// so and leaves the bucket as it was.
func TestTakePausedAndEmpty(t *testing.T) {
	r := newTakeRig(t, 1)
	ctx := context.Background()
	insp := asynq.NewInspectorFromRedisClient(r.rdb)
	if err := insp.PauseQueue(r.q.Name); err != nil {
		t.Fatal(err)
	}
	if rep := r.take(0, false); rep.Status != lua.TakePaused {
		t.Errorf("paused: got status %d, want %d", rep.Status, lua.TakePaused)
	}
	if p, a, _ := r.lens(); p != 1 || a != 0 {
		t.Errorf("paused: pending %d active %d, want 1 0", p, a)
	}
	if err := insp.UnpauseQueue(r.q.Name); err != nil {
		t.Fatal(err)
	}
	if rep := r.take(0, false); rep.Status != lua.TakeTaken || !rep.Drained {
		t.Errorf("unpaused: got %+v, want taken and drained", rep)
	}
	nf := r.rdb.Get(ctx, r.a.Bucket).Val()
	if rep := r.take(0, false); rep.Status != lua.TakeEmpty {
		t.Errorf("empty: got status %d, want %d", rep.Status, lua.TakeEmpty)
	}
	if got := r.rdb.Get(ctx, r.a.Bucket).Val(); got != nf {
		t.Errorf("empty take moved next_free from %s to %s", nf, got)
	}
	if ttl := r.rdb.PTTL(ctx, r.a.Bucket).Val(); ttl <= 0 || ttl > 2*time.Second {
		t.Errorf("next_free TTL %v, want (0, 2s]", ttl)
	}
}

// TestTakeMaintain: a maintenance take puts back a task whose lease
// expired (no attempt consumed) and forwards a due scheduled task.
func TestTakeMaintain(t *testing.T) {
	r := newTakeRig(t, 1)
	r.a.Lease = 2 * time.Second
	t0 := time.Now().UnixMicro()
	if rep := r.take(t0, false); len(rep.Tasks) != 1 {
		t.Fatalf("got %+v, want one task", rep)
	}
	cl := asynq.NewClientFromRedisClient(r.rdb)
	info, err := cl.Enqueue(asynq.NewTask("later", nil), asynq.Queue(r.q.Name), asynq.ProcessIn(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r.a.Budget = 1
	if rep := r.take(t0+1000000, true); rep.Status != lua.TakeEmpty || rep.Recovered != 0 || rep.Forwarded != 0 {
		t.Errorf("lease live: got %+v, want empty, nothing recovered or forwarded", rep)
	}
	rep := r.take(t0+11000000, true)
	if rep.Recovered != 1 || rep.Forwarded != 1 || len(rep.Tasks) != 1 || rep.Tasks[0].ID != r.ids[0] {
		t.Errorf("lease expired: got %+v, want 1 recovered and retaken first, 1 forwarded", rep)
	}
	insp := asynq.NewInspectorFromRedisClient(r.rdb)
	ti, err := insp.GetTaskInfo(r.q.Name, info.ID)
	if err != nil || ti.State != asynq.TaskStatePending {
		t.Errorf("forwarded task: got %v, %v; want pending", ti, err)
	}
	ti, err = insp.GetTaskInfo(r.q.Name, r.ids[0])
	if err != nil || ti.State != asynq.TaskStateActive || ti.Retried != 0 {
		t.Errorf("recovered task: got %+v, %v; want active again, retried 0", ti, err)
	}
}
