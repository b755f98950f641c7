package lua_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/shaper-io/shaper/internal/asynqmsg"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/priority"
	"github.com/shaper-io/shaper/internal/redistest"
)

// A take with a reservation (TakeArgs.Reserve) moves a task only with its
// slot, reserved as shaping.lua reserves: the rate, a quota and the
// announced limit are decided in the same call, on one clock. Slots 100ms
// apart, a 250ms look-ahead: 3 tasks go, each with its slot; a quota of 4
// an hour lets one more go, and then holds the queue until its window
// ends (nothing moves, the reply says when); an announced limit with one
// unit left lets one task go.
func TestTakeReservesTheSlots(t *testing.T) {
	r := newTakeRig(t, 8)
	sp := r.sp
	hour := time.Hour.Microseconds()
	quota := lua.QuotaArgs{Key: sp.Quota("d1", "q"), Limit: 4, Period: hour, Sub: hour, Align: 0}
	r.a.Interval, r.a.Budget, r.a.LookAhead = 0, 100, 250000
	r.a.Reserve = &lua.BucketArgs{Interval: 100000, Answers: lua.AnswerKeys{Announced: sp.Announced("d1"), Issued: sp.Issued("d1")},
		Claims: sp.PriorityClaims("d1"), Quotas: []lua.QuotaArgs{quota}}
	t0 := (time.Now().UnixMicro()/hour)*hour + 1000 // just after a window starts

	rep := r.take(t0, false)
	if rep.Status != lua.TakeTaken || fmt.Sprint(slots(rep, t0)) != "[0 100000 200000]" || rep.Next != t0+300000 {
		t.Fatalf("first take: status %d slots %v next %d; want taken [0 100000 200000] next +300000",
			rep.Status, slots(rep, t0), rep.Next-t0)
	}
	if res := rep.Reservation; res == nil || res.Reserved != 3 || res.Issued != 0 || len(res.Quotas) != 1 || res.Quotas[0].Used != 3 {
		t.Fatalf("first take's reservation %+v; want 3 reserved, issued from 0, 3 units of the quota used", res)
	}
	if nf := r.rdb.Get(context.Background(), sp.Bucket("d1")).Val(); nf != fmt.Sprint(t0+300000) {
		t.Errorf("next_free %s; want %d (the bucket shaping.lua and the lanes read)", nf, t0+300000)
	}
	// the quota has one unit left: one task goes at +300ms
	rep = r.take(t0+100000, false)
	if rep.Status != lua.TakeTaken || fmt.Sprint(slots(rep, t0)) != "[300000]" {
		t.Fatalf("second take: status %d slots %v; want taken [300000]", rep.Status, slots(rep, t0))
	}
	// spent: early until the window's end, and nothing moves
	rep = r.take(t0+300000, false)
	end := t0 - 1000 + hour
	if rep.Status != lua.TakeEarly || rep.Next != end || len(rep.Tasks) != 0 || rep.Reservation == nil || rep.Reservation.HeldBy != 1 {
		t.Fatalf("third take: status %d next %d reservation %+v; want early until the window's end (+%d), held by quota 1",
			rep.Status, rep.Next-t0, rep.Reservation, end-t0)
	}
	if pending, active, _ := r.lens(); pending != 4 || active != 4 {
		t.Errorf("pending %d, active %d; want 4 and 4", pending, active)
	}
	// a new window (no quota now), with an announced limit of 1 unit left
	r.a.Reserve.Quotas = nil
	ctx := context.Background()
	r.rdb.HSet(ctx, sp.Announced("d1"), "left", 1, "until", end+hour)
	rep = r.take(end+1000, false)
	if rep.Status != lua.TakeTaken || len(rep.Tasks) != 1 || rep.Reservation.Issued != 4 {
		t.Fatalf("announced take: status %d tasks %d reservation %+v; want 1 taken, issued from 4",
			rep.Status, len(rep.Tasks), rep.Reservation)
	}
	if left := r.rdb.HGet(ctx, sp.Announced("d1"), "left").Val(); left != "0" {
		t.Errorf("announced left %s; want 0", left)
	}
	var taken []string
	for _, id := range r.rdb.LRange(ctx, r.q.Active(), 0, -1).Val() {
		taken = append([]string{id}, taken...)
	}
	if fmt.Sprint(taken) != fmt.Sprint(r.ids[:5]) {
		t.Errorf("taken %v; want the first enqueued %v (FIFO)", taken, r.ids[:5])
	}
}

// A reservation is the take's rate: beside a rate of the take's own the
// call is refused, and nothing moves.
func TestTakeReserveRefusesOtherModes(t *testing.T) {
	r := newTakeRig(t, 2)
	r.a.Reserve = &lua.BucketArgs{Interval: 100000}
	if _, err := r.st.Take(context.Background(), r.a); err == nil {
		t.Error("a reservation beside the take's own rate: no error")
	}
	if pending, _, _ := r.lens(); pending != 2 {
		t.Errorf("pending %d; want 2", pending)
	}
}

func slots(rep lua.TakeReply, t0 int64) []int64 {
	var out []int64
	for _, tt := range rep.Tasks {
		out = append(out, tt.Slot-t0)
	}
	return out
}

// The take reserves one unit a slot, for the run of unit-cost tasks at the
// tail of pending (their msg's header "shaper-cost", read in the script);
// a task of more units at the tail goes alone, and a run of tasks past
// their deadline ("shaper-deadline", to the µs) together, with no slot
// reserved (the lane reserves the one's units, the others are archived
// unsent), and the run after them is reserved again.
func TestTakeReservesUnitTasksOnly(t *testing.T) {
	r := newTakeRig(t, 0)
	cl := asynq.NewClientFromRedisClient(r.rdb)
	t0 := time.Now().UnixMicro()
	at := func(us int64) string { return time.UnixMicro(us).UTC().Format(time.RFC3339Nano) }
	for i, h := range []map[string]string{
		{"shaper-cost": "1"}, {}, {"shaper-cost": "5"},
		{"shaper-deadline": at(t0 - 1)}, {"shaper-deadline": at(t0 - 1), "shaper-cost": "5"},
		{"shaper-deadline": at(t0 + 1)},
	} {
		h["shaper-key"] = "shaper-cost\x12\x015" // not a header entry: ignored
		info, err := cl.Enqueue(asynq.NewTaskWithHeaders("job", []byte(fmt.Sprint(i)), h), asynq.Queue(r.sp.Queue("d1")))
		if err != nil {
			t.Fatal(err)
		}
		r.ids = append(r.ids, info.ID)
	}
	r.a.Interval, r.a.Budget, r.a.LookAhead = 0, 100, 1000000
	r.a.Reserve = &lua.BucketArgs{Interval: 100000}
	var got []string
	for i, want := range []struct {
		tasks    int
		reserved bool
	}{{2, true}, {1, false}, {2, false}, {1, true}} {
		rep := r.take(t0, false)
		if len(rep.Tasks) != want.tasks || (rep.Reservation != nil) != want.reserved {
			t.Fatalf("take %d: %d tasks, reservation %+v; want %d, reserved %v", i, len(rep.Tasks), rep.Reservation, want.tasks, want.reserved)
		}
		for _, tt := range rep.Tasks {
			got = append(got, tt.ID)
			if !want.reserved && tt.Slot != t0 {
				t.Errorf("take %d: task %s without a reservation has slot %d, want now (%d)", i, tt.ID, tt.Slot, t0)
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(r.ids) {
		t.Errorf("taken %v; want %v (FIFO)", got, r.ids)
	}
	if nf := r.rdb.Get(context.Background(), r.sp.Bucket("d1")).Val(); nf != fmt.Sprint(t0+300000) {
		t.Errorf("next_free %s; want %d: 3 units reserved, none for the others", nf, t0+300000)
	}
}

// With strict priority the take reserves for the tasks in the order it
// takes them: levels 1 and 2 before pending (3), then 4 and 5; an entry
// of a priority list whose task hash is gone (deleted behind shaper's
// back) gets no slot and is dropped. Slots 100ms apart, a 450ms
// look-ahead (5 slots): the first take looks at the 5 next in priority
// order and moves the 4 whose hash is there, each with its slot; the
// next, 500ms later, the rest.
func TestTakeReservesInPriorityOrder(t *testing.T) {
	rdb := redistest.Client(t)
	r := newWeightedRig(t, rdb)
	r.a.Weights, r.a.Turns = priority.Weights{}, "" // strict
	r.add(5, 2)
	r.add(3, 2)
	r.add(1, 2)
	r.add(2, 1)
	ctx := context.Background()
	// the level-2 task's hash goes, as an Inspector delete would leave it
	l2 := rdb.LRange(ctx, r.sp.TakePriority("d1", 2), 0, -1).Val()
	must(t, rdb.Del(ctx, r.sp.Asynq("d1").Task(l2[0])).Err())
	r.a.LookAhead, r.a.Slots = 450000, 10
	r.a.Reserve = &lua.BucketArgs{Interval: 100000, Answers: lua.AnswerKeys{Announced: r.sp.Announced("d1"), Issued: r.sp.Issued("d1")},
		Claims: r.sp.PriorityClaims("d1")}
	t0 := time.Now().UnixMicro()
	var prios, offs []int64
	for _, want := range []int{4, 2} {
		a := r.a
		ra := *a.Reserve
		a.Now, ra.Now, a.Reserve = t0, t0, &ra
		rep, err := r.st.Take(ctx, a)
		must(t, err)
		if len(rep.Tasks) != want || rep.Reservation == nil {
			t.Fatalf("take: %d tasks, reservation %+v; want %d, reserved", len(rep.Tasks), rep.Reservation, want)
		}
		for _, tt := range rep.Tasks {
			prios, offs = append(prios, int64(tt.Priority)), append(offs, (tt.Slot-t0)/1000)
		}
		t0 += 500000
	}
	if fmt.Sprint(prios) != "[1 1 3 3 5 5]" || fmt.Sprint(offs) != "[0 100 200 300 0 100]" {
		t.Errorf("priorities %v at slots %v ms; want [1 1 3 3 5 5] at [0 100 200 300 0 100] (the second take's from its now)", prios, offs)
	}
	if n := rdb.LLen(ctx, r.sp.TakePriority("d1", 2)).Val(); n != 0 {
		t.Errorf("level 2 holds %d entries; want the deleted task's dropped", n)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// With weighted priority the take reserves for the tasks in the order its
// weighted turns take them, played on a copy of the turns' tags before
// the pick: a take with a reservation moves the same tasks in the same
// order as one without, each with its slot, and a task of 5 units in the
// middle of that order ends the run before it and goes alone, without a
// slot (so the played order matched the pick's).
func TestTakeReservesInWeightedOrder(t *testing.T) {
	rdb := redistest.Client(t)
	plain, reserving := newWeightedRig(t, rdb), newWeightedRig(t, rdb)
	for _, r := range []*weightedRig{plain, reserving} {
		q := r.sp.Asynq("d1")
		for _, lv := range []int{5, 3, 1} {
			for i := range 5 {
				h := map[string]string{}
				if lv == 3 && i == 1 {
					h["shaper-cost"] = "5"
				}
				info, err := r.cl.Enqueue(asynq.NewTaskWithHeaders("job", []byte(fmt.Sprintf("L%d-%d", lv, i)), h), asynq.Queue(q.Name))
				must(t, err)
				if lv != priority.Default {
					if _, err := r.st.PlacePriority(context.Background(), q, r.sp.TakePriority("d1", lv), info.ID, lv); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	reserving.a.Reserve = &lua.BucketArgs{Interval: 10000, Answers: lua.AnswerKeys{Announced: reserving.sp.Announced("d1"),
		Issued: reserving.sp.Issued("d1")}, Claims: reserving.sp.PriorityClaims("d1")}
	reserving.a.LookAhead = 1000000
	payloads := func(rep lua.TakeReply) []string {
		var out []string
		for _, tt := range rep.Tasks {
			m, err := asynqmsg.Decode(tt.Msg)
			must(t, err)
			out = append(out, string(m.Payload))
		}
		return out
	}
	take := func(r *weightedRig, n int) lua.TakeReply {
		a := r.a
		a.Slots = int64(n)
		rep, err := r.st.Take(context.Background(), a)
		must(t, err)
		return rep
	}
	var want, got []string
	for len(want) < 15 {
		want = append(want, payloads(take(plain, 15))...)
	}
	alone := ""
	for len(got) < 15 {
		rep := take(reserving, 15)
		p := payloads(rep)
		if rep.Reservation == nil {
			if len(p) != 1 {
				t.Fatalf("a take without a reservation moved %v; want one task", p)
			}
			alone = p[0]
		}
		got = append(got, p...)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("reserving takes moved %v; want the plain take's order %v", got, want)
	}
	if alone != "L3-1" {
		t.Errorf("the task taken alone without a slot is %q; want L3-1 (5 units)", alone)
	}
}

// Tasks of more units next in line go together without slots, as many as
// their units fit in the look-ahead's slots (the lane then reserves their
// slots back to back): 3 tasks of 5 units with 11 slots in view go 2,
// then 1.
func TestTakeMovesARunOfCostlyTasks(t *testing.T) {
	r := newTakeRig(t, 0)
	cl := asynq.NewClientFromRedisClient(r.rdb)
	for i := range 3 {
		info, err := cl.Enqueue(asynq.NewTaskWithHeaders("job", []byte(fmt.Sprint(i)), map[string]string{"shaper-cost": "5"}),
			asynq.Queue(r.sp.Queue("d1")))
		must(t, err)
		r.ids = append(r.ids, info.ID)
	}
	r.a.Interval, r.a.Budget, r.a.LookAhead, r.a.Slots = 0, 100, 1000000, 100
	r.a.Reserve = &lua.BucketArgs{Interval: 100000}
	t0 := time.Now().UnixMicro()
	for i, want := range []int{2, 1} {
		rep := r.take(t0, false)
		if len(rep.Tasks) != want || rep.Reservation != nil {
			t.Fatalf("take %d: %d tasks, reservation %+v; want %d without one", i, len(rep.Tasks), rep.Reservation, want)
		}
	}
}

// A concurrency cap decided at the take (TakeArgs.Leases): the take moves
// no more tasks than the cap has places left, each with its slot and a
// lease (member token+id+"|") until its lease time; with the cap full
// nothing moves (full); a lease released or expired makes room.
func TestTakeReserveLeasesUnderACap(t *testing.T) {
	r := newTakeRig(t, 6)
	sp, ctx := r.sp, context.Background()
	r.reserving(10 * time.Millisecond)
	l := &lua.TakeLeases{Leases: sp.Leases("d1"), Counts: sp.LeaseCounts("d1"), Cap: 2, Lease: 30 * time.Second, Token: "tk1:"}
	r.a.Leases = l
	t0 := time.Now().UnixMicro()
	rep := r.take(t0, false)
	if rep.Status != lua.TakeTaken || len(rep.Tasks) != 2 {
		t.Fatalf("first take: status %d, %d tasks; want 2 (the cap)", rep.Status, len(rep.Tasks))
	}
	for _, tk := range rep.Tasks {
		exp, err := r.rdb.ZScore(ctx, sp.Leases("d1"), l.LeaseMember(tk.ID, tk.LeaseKey)).Result()
		if err != nil || int64(exp) != t0+30000000 {
			t.Errorf("task %s: lease expires %v (%v); want now + 30s", tk.ID, int64(exp), err)
		}
	}
	if rep = r.take(t0+1000, false); rep.Status != lua.TakeFull || len(rep.Tasks) != 0 {
		t.Fatalf("second take: status %d, %d tasks; want full, none", rep.Status, len(rep.Tasks))
	}
	// one released (concurrency.lua's release), one expired by +30.001s
	if n, err := r.st.ReleaseLeases(ctx, l.Leases, l.Counts, lua.LeaseArgs{}, []string{l.LeaseMember(r.ids[0], "")}); err != nil || n != 1 {
		t.Fatalf("release: %d, %v", n, err)
	}
	if rep = r.take(t0+2000, false); len(rep.Tasks) != 1 || rep.Tasks[0].ID != r.ids[2] {
		t.Fatalf("after a release: %d tasks; want 1, the third", len(rep.Tasks))
	}
	if rep = r.take(t0+30001000, false); len(rep.Tasks) != 1 || rep.Tasks[0].ID != r.ids[3] {
		t.Fatalf("after a lease expired: %d tasks; want 1, the fourth", len(rep.Tasks))
	}
	if n := r.rdb.ZCard(ctx, l.Leases).Val(); n != 2 {
		t.Errorf("%d leases; want 2", n)
	}
}

// shaper's pause is decided in the reserving take (TakeArgs.Pause): while
// the downstream's state says paused the take moves nothing, whichever
// process makes it; once resumed it takes again.
func TestTakeReserveHonoursThePause(t *testing.T) {
	r := newTakeRig(t, 3)
	sp, ctx := r.sp, context.Background()
	r.reserving(10 * time.Millisecond)
	r.a.Pause = &lua.TakePause{Key: sp.DownstreamState("d1"), Field: "paused"}
	r.rdb.HSet(ctx, sp.DownstreamState("d1"), "paused", "1")
	t0 := time.Now().UnixMicro()
	if rep := r.take(t0, false); rep.Status != lua.TakePaused || len(rep.Tasks) != 0 {
		t.Fatalf("paused: status %d, %d tasks; want paused, none", rep.Status, len(rep.Tasks))
	}
	if pending, active, _ := r.lens(); pending != 3 || active != 0 {
		t.Errorf("paused: pending %d, active %d; want 3 and 0", pending, active)
	}
	r.rdb.HDel(ctx, sp.DownstreamState("d1"), "paused")
	if rep := r.take(t0+1000, false); rep.Status != lua.TakeTaken || len(rep.Tasks) != 3 {
		t.Fatalf("resumed: status %d, %d tasks; want 3 taken", rep.Status, len(rep.Tasks))
	}
}

// reserving has r's takes reserve slots interval apart within a second's
// look-ahead, with a budget of 100 leases.
func (r *takeRig) reserving(interval time.Duration) {
	sp := r.sp
	r.a.Interval, r.a.Budget, r.a.LookAhead = 0, 100, time.Second.Microseconds()
	r.a.Reserve = &lua.BucketArgs{Interval: interval.Microseconds(), Answers: lua.AnswerKeys{Announced: sp.Announced("d1"),
		Issued: sp.Issued("d1")}, Claims: sp.PriorityClaims("d1")}
}

// A cap per key in first-in first-out order (TakeLeases.KeyCap without
// fair order): the take passes over a task whose key (its "shaper-key"
// header) is at its cap, counting its leases and its tasks taken before
// in the same take; such a task stays in pending where it is and goes
// first once a call of its key ends. When every task in view is of a key
// at its cap, nothing moves (full).
func TestTakeReservePassesOverAKeyAtItsCap(t *testing.T) {
	r := newTakeRig(t, 0)
	sp, ctx := r.sp, context.Background()
	cl := asynq.NewClientFromRedisClient(r.rdb)
	name := map[string]string{}
	for i, key := range []string{"A", "A", "B", "A", "C"} {
		info, err := cl.Enqueue(asynq.NewTaskWithHeaders("job", nil, map[string]string{"shaper-key": key}), asynq.Queue(sp.Queue("d1")))
		must(t, err)
		name[info.ID] = fmt.Sprint(key, i)
	}
	r.reserving(10 * time.Millisecond)
	l := &lua.TakeLeases{Leases: sp.Leases("d1"), Counts: sp.LeaseCounts("d1"), KeyCap: 1, Lease: 30 * time.Second, Token: "tk:"}
	r.a.Leases = l
	names := func(rep lua.TakeReply) string {
		var out []string
		for _, tk := range rep.Tasks {
			out = append(out, name[tk.ID])
		}
		return fmt.Sprint(out)
	}
	t0 := time.Now().UnixMicro()
	rep := r.take(t0, false)
	if got := names(rep); got != "[A0 B2 C4]" {
		t.Fatalf("first take: %s; want [A0 B2 C4] (one of A)", got)
	}
	if p := r.rdb.LRange(ctx, r.q.Pending(), 0, -1).Val(); len(p) != 2 {
		t.Fatalf("pending %v; want A1 and A3, where they were", p)
	}
	if rep2 := r.take(t0+100000, false); rep2.Status != lua.TakeFull || len(rep2.Tasks) != 0 {
		t.Fatalf("second take: status %d, %s; want full (A at its cap)", rep2.Status, names(rep2))
	}
	if _, err := r.st.ReleaseLeases(ctx, l.Leases, l.Counts, lua.LeaseArgs{KeyCap: 1}, []string{l.LeaseMember(rep.Tasks[0].ID, rep.Tasks[0].LeaseKey)}); err != nil {
		t.Fatal(err)
	}
	if got := names(r.take(t0+200000, false)); got != "[A1]" {
		t.Fatalf("after A0's call: %s; want [A1]", got)
	}
	// A1's lease expires (its process died): the take frees its place
	if got := names(r.take(t0+30300000, false)); got != "[A3]" {
		t.Fatalf("after A1's lease expired: %s; want [A3]", got)
	}
}

// Weighted priority through a line of chosen tasks (a cap per key on the
// downstream: levelsLine with the weights) takes the same order as
// pickWeighted, take after take: the levels' turns it keeps are those
// after the last task it took.
func TestTakeWeightedLineKeepsTheTurns(t *testing.T) {
	rdb := redistest.Client(t)
	plain, capped := newWeightedRig(t, rdb), newWeightedRig(t, rdb)
	for _, r := range []*weightedRig{plain, capped} {
		q := r.sp.Asynq("d1")
		for _, lv := range []int{5, 3, 1} {
			for i := range 6 {
				info, err := r.cl.Enqueue(asynq.NewTaskWithHeaders("job", []byte(fmt.Sprintf("L%d-%d", lv, i)),
					map[string]string{"shaper-key": fmt.Sprint("k", i)}), asynq.Queue(q.Name))
				must(t, err)
				if lv != priority.Default {
					_, err := r.st.PlacePriority(context.Background(), q, r.sp.TakePriority("d1", lv), info.ID, lv)
					must(t, err)
				}
			}
		}
	}
	sp := capped.sp
	capped.a.Reserve = &lua.BucketArgs{Interval: 10000, Answers: lua.AnswerKeys{Announced: sp.Announced("d1"),
		Issued: sp.Issued("d1")}, Claims: sp.PriorityClaims("d1")}
	capped.a.LookAhead = 1000000
	capped.a.Leases = &lua.TakeLeases{Leases: sp.Leases("d1"), Counts: sp.LeaseCounts("d1"), KeyCap: 100, Lease: 30 * time.Second, Token: "tk:"}
	order := func(r *weightedRig) []string {
		var out []string
		for len(out) < 18 {
			a := r.a
			a.Slots = 4
			rep, err := r.st.Take(context.Background(), a)
			must(t, err)
			if len(rep.Tasks) == 0 {
				t.Fatalf("a take moved nothing after %v", out)
			}
			for _, tt := range rep.Tasks {
				m, err := asynqmsg.Decode(tt.Msg)
				must(t, err)
				out = append(out, string(m.Payload))
			}
		}
		return out
	}
	want, got := order(plain), order(capped)
	t.Logf("order %v", want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("a line of chosen tasks took %v; pickWeighted %v", got, want)
	}
}

// A cap per key with strict priority: the take serves the lists in
// priority order and passes over, in each, a task whose key is at its cap
// (counting the tasks it took before in the same take), which stays where
// it is in its list.
func TestTakeReservePriorityUnderAKeyCap(t *testing.T) {
	rdb := redistest.Client(t)
	r := newWeightedRig(t, rdb)
	r.a.Weights, r.a.Turns = priority.Weights{}, "" // strict
	q, sp, ctx := r.sp.Asynq("d1"), r.sp, context.Background()
	name := map[string]string{}
	for _, tk := range []struct {
		lv  int
		key string
	}{{1, "X"}, {1, "X"}, {1, "Y"}, {3, "X"}, {3, "Z"}, {5, "Y"}, {5, "W"}} {
		info, err := r.cl.Enqueue(asynq.NewTaskWithHeaders("job", nil, map[string]string{"shaper-key": tk.key}), asynq.Queue(q.Name))
		must(t, err)
		name[info.ID] = fmt.Sprint("L", tk.lv, tk.key)
		if tk.lv != priority.Default {
			_, err := r.st.PlacePriority(ctx, q, sp.TakePriority("d1", tk.lv), info.ID, tk.lv)
			must(t, err)
		}
	}
	r.a.Reserve = &lua.BucketArgs{Interval: 10000, Answers: lua.AnswerKeys{Announced: sp.Announced("d1"),
		Issued: sp.Issued("d1")}, Claims: sp.PriorityClaims("d1")}
	r.a.LookAhead, r.a.Slots = 1000000, 10
	r.a.Leases = &lua.TakeLeases{Leases: sp.Leases("d1"), Counts: sp.LeaseCounts("d1"), KeyCap: 1, Lease: 30 * time.Second, Token: "tk:"}
	rep, err := r.st.Take(ctx, r.a)
	must(t, err)
	var got []string
	for _, tt := range rep.Tasks {
		got = append(got, name[tt.ID])
	}
	if fmt.Sprint(got) != "[L1X L1Y L3Z L5W]" {
		t.Fatalf("take: %v; want [L1X L1Y L3Z L5W] (one call of each key)", got)
	}
	if n := rdb.LLen(ctx, sp.TakePriority("d1", 1)).Val(); n != 1 {
		t.Errorf("level 1 holds %d; want X's second, where it was", n)
	}
}

// With MaxUnits the take reserves a run of tasks of one cost of more
// units too: a slot of that many units each (next_free moves by the
// units, the quota counts them), as many as their units fit in the
// look-ahead's slots, at least one; a task of more than MaxUnits is taken
// without a slot (its caller refuses it). Each task says its units.
func TestTakeReservesARunOfCostlyTasks(t *testing.T) {
	r := newTakeRig(t, 0)
	cl := asynq.NewClientFromRedisClient(r.rdb)
	for i, c := range []string{"5", "5", "3", "9"} {
		info, err := cl.Enqueue(asynq.NewTaskWithHeaders("job", []byte(fmt.Sprint(i)), map[string]string{"shaper-cost": c}),
			asynq.Queue(r.sp.Queue("d1")))
		must(t, err)
		r.ids = append(r.ids, info.ID)
	}
	r.reserving(100 * time.Millisecond)
	r.a.LookAhead, r.a.Slots, r.a.MaxUnits = 1000000, 100, 8
	t0 := time.Now().UnixMicro()
	for i, want := range []struct {
		slots []int64 // ms from t0
		units int64
	}{{[]int64{0, 500}, 5}, {[]int64{1000}, 3}, {[]int64{1300}, 0}} {
		rep := r.take(t0+int64(i), false)
		var got []int64
		for _, tt := range rep.Tasks {
			if tt.Units != want.units {
				t.Errorf("take %d: task of %d units; want %d", i, tt.Units, want.units)
			}
			if want.units > 0 {
				got = append(got, (tt.Slot-t0)/1000)
			}
		}
		if len(rep.Tasks) != max(len(want.slots), 1) || (rep.Reservation != nil) != (want.units > 0) {
			t.Fatalf("take %d: %d tasks, reservation %+v; want %d", i, len(rep.Tasks), rep.Reservation, len(want.slots))
		}
		if want.units > 0 && fmt.Sprint(got) != fmt.Sprint(want.slots) {
			t.Errorf("take %d: slots %v ms; want %v", i, got, want.slots)
		}
	}
	if nf := r.rdb.Get(context.Background(), r.sp.Bucket("d1")).Val(); nf != fmt.Sprint(t0+1300000) {
		t.Errorf("next_free %s; want %d: 13 units reserved, none for the task of 9", nf, t0+1300000)
	}
}
