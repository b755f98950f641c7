package lua_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/control"
	"github.com/shaper-io/shaper/internal/fairindex"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/redistest"
)

// fairRig is a fair downstream "d1" under a prefix of the test's own: the
// client and prefix, its keys, its fair queue and an asynq client.
func fairRig(t testing.TB) (redis.UniversalClient, string, keys.Space, keys.AsynqQueue, keys.FairKeys, *fairindex.Queue, *asynq.Client) {
	rdb, prefix := redistest.Client(t), redistest.Prefix(t)
	sp := keys.New(prefix)
	return rdb, prefix, sp, sp.Asynq("d1"), sp.Fair("d1"), fairindex.New(rdb, prefix), asynq.NewClientFromRedisClient(rdb)
}

// take.lua on a fair downstream: the task at the tail of pending not in
// fair order first (a task given back), then the parked tasks by start
// tag (ties: by key), each moved from asynq's pending list to active
// under a lease; a paused key's task goes to held, pending still; V
// follows the tags; a take that runs out with nothing left in fair order
// lets the fair keys expire within a minute.
func TestTakeFairOrder(t *testing.T) {
	ctx := context.Background()
	rdb, prefix, sp, q, fk, fq, cl := fairRig(t)
	f := &fairindex.Fairness{}
	names := map[string]string{} // task id → "A0", "B1", ...
	enqueue := func(name string, opts ...asynq.Option) string {
		info, err := cl.Enqueue(asynq.NewTask("job", []byte(name)), append(opts, asynq.Queue(sp.Queue("d1")))...)
		if err != nil {
			t.Fatal(err)
		}
		names[info.ID] = name
		return info.ID
	}
	park := func(key string, n int) {
		for i := range n {
			id := enqueue(fmt.Sprint(key, i))
			if _, err := fq.Park(ctx, "d1", f, id, key, 1, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	enqueue("P") // in pending: a task given back or recovered
	park("A", 4)
	park("B", 2)
	if err := control.New(rdb, prefix).SetKeyPaused(ctx, "d1", "C", true); err != nil {
		t.Fatal(err)
	}
	park("C", 2)

	st := lua.New(rdb)
	rep, err := st.Take(ctx, lua.TakeArgs{Bucket: sp.Bucket("d1"), Queue: q, Slots: 20, Budget: 100,
		Lease: 30 * time.Second, Maintained: sp.TakeMaintained("d1"), MaintainEvery: time.Hour,
		Fair: &fk, FairTTL: fairindex.KeyTTL})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, tk := range rep.Tasks {
		order = append(order, names[tk.ID])
		if s := rdb.HGet(ctx, q.Task(tk.ID), "state").Val(); s != "active" {
			t.Errorf("%s taken in state %q", names[tk.ID], s)
		}
		if rdb.ZScore(ctx, q.Lease(), tk.ID).Err() != nil {
			t.Errorf("%s taken without a lease", names[tk.ID])
		}
	}
	if got, want := fmt.Sprint(order), "[P A0 B0 A1 B1 A2 A3]"; got != want {
		t.Errorf("taken %s, want %s", got, want)
	}
	if !rep.Drained {
		t.Errorf("take did not say it ran out")
	}
	if n := rdb.LLen(ctx, q.Pending()).Val(); n != 2 {
		t.Errorf("%d tasks still pending, want C's 2", n)
	}
	if n := rdb.ZCard(ctx, fk.Held).Val(); n != 2 {
		t.Errorf("held %d, want the paused C's 2", n)
	}
	if v := rdb.HGet(ctx, fk.State, "v").Val(); v != "3" {
		t.Errorf("V is %q after the take, want 3 (A3's tag)", v)
	}
	// C's tasks are held: the fair keys keep their TTL until they go
	if ttl := rdb.PTTL(ctx, fk.Tags).Val(); ttl < time.Hour {
		t.Errorf("tags TTL %v while C's tasks are held, want the horizon's", ttl)
	}
	if err := control.New(rdb, prefix).SetKeyPaused(ctx, "d1", "C", false); err != nil {
		t.Fatal(err)
	}
	if n, err := fq.Resume(ctx, "d1", "C", 10); err != nil || n != 2 {
		t.Fatalf("resume moved %d (%v), want 2", n, err)
	}
	rep, err = st.Take(ctx, lua.TakeArgs{Bucket: sp.Bucket("d1"), Queue: q, Slots: 20, Budget: 100,
		Lease: 30 * time.Second, Maintained: sp.TakeMaintained("d1"), MaintainEvery: time.Hour,
		Fair: &fk, FairTTL: fairindex.KeyTTL})
	if err != nil || len(rep.Tasks) != 2 {
		t.Fatalf("took %d of C after the resume (%v), want 2", len(rep.Tasks), err)
	}
	for _, k := range []string{fk.Tags, fk.State} {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 || ttl > time.Minute {
			t.Errorf("%s TTL %v once fair order is empty, want at most 1m", k, ttl)
		}
	}
}

// take_hold.lua: a fair task taken before its key was paused leaves
// active and its lease for the key's held set (at V), waits in asynq's
// pending list, numbered, as parked tasks do, counted again; a second hold of it
// writes nothing; a resume brings it back to parked and the next take
// takes it.
func TestTakeHold(t *testing.T) {
	ctx := context.Background()
	rdb, _, sp, q, fk, fq, cl := fairRig(t)
	f := &fairindex.Fairness{}
	var ids []string
	for i := range 2 {
		info, err := cl.Enqueue(asynq.NewTask("job", []byte(fmt.Sprint("A", i))), asynq.Queue(sp.Queue("d1")))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fq.Park(ctx, "d1", f, info.ID, "A", 2, time.Time{}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.ID)
	}
	st := lua.New(rdb)
	take := func() []string {
		rep, err := st.Take(ctx, lua.TakeArgs{Bucket: sp.Bucket("d1"), Queue: q, Slots: 1, Budget: 100,
			Lease: 30 * time.Second, Maintained: sp.TakeMaintained("d1"), MaintainEvery: time.Hour,
			Fair: &fk, FairTTL: fairindex.KeyTTL})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, tk := range rep.Tasks {
			out = append(out, tk.ID)
		}
		return out
	}
	if got := take(); len(got) != 1 || got[0] != ids[0] {
		t.Fatalf("took %v, want A0 %s", got, ids[0])
	}
	if n := rdb.HGet(ctx, fk.Counts, "A").Val(); n != "1" {
		t.Fatalf("counts of A %q after the take, want 1", n)
	}
	a := lua.TakeHoldArgs{Queue: q, Fair: fk, ID: ids[0], Key: "A", Cost: 2, Weight: 1, TTL: fairindex.KeyTTL}
	if ok, err := st.TakeHold(ctx, a); err != nil || !ok {
		t.Fatalf("hold: %v %v, want held", ok, err)
	}
	if n := rdb.LLen(ctx, q.Active()).Val() + rdb.ZCard(ctx, q.Lease()).Val(); n != 0 {
		t.Errorf("%d entries left in active and lease, want 0", n)
	}
	if p := rdb.LRange(ctx, q.Pending(), 0, -1).Val(); fmt.Sprint(p) != fmt.Sprint([]string{ids[0], ids[1]}) {
		t.Errorf("pending %v after the hold, want A0 back at the head %v", p, ids)
	}
	if !rdb.HExists(ctx, fk.Pos, ids[0]).Val() {
		t.Errorf("held task not numbered in pending")
	}
	if s := rdb.HGet(ctx, q.Task(ids[0]), "state").Val(); s != "pending" {
		t.Errorf("held task in state %q, want pending", s)
	}
	held := rdb.ZRange(ctx, fk.Held, 0, -1).Val()
	if want := "1|A|0|2|1|1|A" + ids[0]; len(held) != 1 || held[0] != want {
		t.Errorf("held %q, want [%s] (at V, A0's start tag 0)", held, want)
	}
	if n := rdb.HGet(ctx, fk.Counts, "A").Val(); n != "2" {
		t.Errorf("counts of A %q after the hold, want 2", n)
	}
	if ttl := rdb.PTTL(ctx, fk.Held).Val(); ttl < fairindex.KeyTTL-time.Minute {
		t.Errorf("held TTL %v, want the fair keys' TTL", ttl)
	}
	if ok, err := st.TakeHold(ctx, a); err != nil || ok {
		t.Errorf("second hold: %v %v, want nothing written", ok, err)
	}
	if n, err := fq.Resume(ctx, "d1", "A", 10); err != nil || n != 1 {
		t.Fatalf("resume moved %d (%v), want 1", n, err)
	}
	// A0 is back at its tag 0, before A1 (tag 2)
	if got := append(take(), take()...); fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Errorf("took %v after the resume, want A0 then A1 %v", got, ids)
	}
}

// A fair downstream's waiting tasks are pending to asynq's Inspector, and
// takes move them out of the middle of the list in fair order without a
// scan, even after the Inspector deleted and archived tasks from the
// middle (the numbers of the tasks past them are then off, and a take
// finds each in a window around its place: no LPOS). A task given back
// (at the tail, not in fair order) goes first; one enqueued by asynq's
// Client alone, not parked, goes once it reaches the tail. Every task is
// taken once; nothing is left numbered.
func TestFairTasksWaitPending(t *testing.T) {
	ctx := context.Background()
	rdb, _, sp, q, fk, fq, cl := fairRig(t)
	f := &fairindex.Fairness{}
	names := map[string]string{}
	ids := map[string]string{}
	enqueue := func(name string) string {
		info, err := cl.Enqueue(asynq.NewTask("job", []byte(name)), asynq.Queue(sp.Queue("d1")))
		if err != nil {
			t.Fatal(err)
		}
		names[info.ID], ids[name] = name, info.ID
		return info.ID
	}
	for _, key := range []string{"A", "B"} {
		for i := range 20 {
			id := enqueue(fmt.Sprint(key, i))
			if _, err := fq.Park(ctx, "d1", f, id, key, 1, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	in := asynq.NewInspectorFromRedisClient(rdb)
	qi, err := in.GetQueueInfo(sp.Queue("d1"))
	if err != nil {
		t.Fatal(err)
	}
	if qi.Pending != 40 || qi.Scheduled != 0 {
		t.Errorf("Inspector: %d pending, %d scheduled; want the 40 fair tasks pending", qi.Pending, qi.Scheduled)
	}
	if ti, err := in.GetTaskInfo(sp.Queue("d1"), ids["B7"]); err != nil || ti.State != asynq.TaskStatePending {
		t.Errorf("Inspector: B7 %v (%v), want pending", ti, err)
	}
	// from the middle, by hand: A5, B3 and A17 deleted, B10 archived
	for _, n := range []string{"A5", "B3", "A17"} {
		if err := in.DeleteTask(sp.Queue("d1"), ids[n]); err != nil {
			t.Fatal(err)
		}
	}
	if err := in.ArchiveTask(sp.Queue("d1"), ids["B10"]); err != nil {
		t.Fatal(err)
	}
	enqueue("X") // asynq's Client alone: not in fair order
	g := enqueue("G")
	if err := rdb.LRem(ctx, q.Pending(), 1, g).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.RPush(ctx, q.Pending(), g) // given back: at the tail

	lposBefore := commandCalls(t, rdb, "lpos")
	st := lua.New(rdb)
	var order []string
	for range 50 {
		rep, err := st.Take(ctx, lua.TakeArgs{Bucket: sp.Bucket("d1"), Queue: q, Slots: 1, Budget: 100,
			Lease: 30 * time.Second, Maintained: sp.TakeMaintained("d1"), MaintainEvery: time.Hour,
			Fair: &fk, FairTTL: fairindex.KeyTTL})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Tasks) == 0 {
			break
		}
		order = append(order, names[rep.Tasks[0].ID])
	}
	want := []string{"G"}
	for i := range 20 {
		for _, key := range []string{"A", "B"} {
			if n := fmt.Sprint(key, i); n != "A5" && n != "B3" && n != "A17" && n != "B10" {
				want = append(want, n)
			}
		}
	}
	want = append(want, "X")
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Errorf("taken\n %v\nwant\n %v", order, want)
	}
	if n := commandCalls(t, rdb, "lpos") - lposBefore; n != 0 {
		t.Errorf("the takes scanned pending with LPOS %d times, want 0", n)
	}
	if n := rdb.LLen(ctx, q.Pending()).Val() + rdb.HLen(ctx, fk.Pos).Val(); n != 0 {
		t.Errorf("%d entries left in pending and pos, want 0", n)
	}
	if n := rdb.LLen(ctx, q.Active()).Val(); n != int64(len(want)) {
		t.Errorf("%d active, want %d", n, len(want))
	}
}

// A task parked by an earlier version waits in asynq's scheduled set a day
// ahead, not numbered: a take still takes it in its turn.
func TestFairTakesTasksParkedBeforeTheyWaitedPending(t *testing.T) {
	ctx := context.Background()
	rdb, _, sp, q, fk, _, cl := fairRig(t)
	info, err := cl.Enqueue(asynq.NewTask("job", nil), asynq.Queue(sp.Queue("d1")), asynq.ProcessIn(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	rdb.ZAdd(ctx, fk.Parked, redis.Z{Score: 0, Member: "1|1|1|L" + info.ID})
	rdb.HSet(ctx, fk.Counts, "L", 1)
	rep, err := lua.New(rdb).Take(ctx, lua.TakeArgs{Bucket: sp.Bucket("d1"), Queue: q, Slots: 5, Budget: 100,
		Lease: 30 * time.Second, Maintained: sp.TakeMaintained("d1"), MaintainEvery: time.Hour,
		Fair: &fk, FairTTL: fairindex.KeyTTL})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Tasks) != 1 || rep.Tasks[0].ID != info.ID {
		t.Fatalf("took %+v, want the task parked in scheduled", rep.Tasks)
	}
	if n := rdb.ZCard(ctx, q.Scheduled()).Val(); n != 0 {
		t.Errorf("%d left in scheduled, want 0", n)
	}
}

// commandCalls is Redis's count of calls of cmd so far (INFO
// commandstats), scripts' own calls included.
func commandCalls(t *testing.T, rdb redis.UniversalClient, cmd string) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
			return n
		}
	}
	return 0
}

// fairPlay is a fair downstream's tasks by name: park enqueues n tasks of
// key (named key0, key1, ...) and parks them; take takes up to n (with
// the maintenance first when maintain) and names them.
type fairPlay struct {
	t     *testing.T
	rdb   redis.UniversalClient
	sp    keys.Space
	q     keys.AsynqQueue
	fk    keys.FairKeys
	fq    *fairindex.Queue
	cl    *asynq.Client
	names map[string]string // id → name
}

func newFairPlay(t *testing.T) *fairPlay {
	rdb, _, sp, q, fk, fq, cl := fairRig(t)
	return &fairPlay{t: t, rdb: rdb, sp: sp, q: q, fk: fk, fq: fq, cl: cl, names: map[string]string{}}
}

func (p *fairPlay) park(key string, n int) {
	for i := range n {
		info, err := p.cl.Enqueue(asynq.NewTask("job", nil), asynq.Queue(p.sp.Queue("d1")))
		if err != nil {
			p.t.Fatal(err)
		}
		p.names[info.ID] = fmt.Sprint(key, i)
		if _, err := p.fq.Park(context.Background(), "d1", &fairindex.Fairness{}, info.ID, key, 1, time.Time{}); err != nil {
			p.t.Fatal(err)
		}
	}
}

func (p *fairPlay) take(n int64, maintain bool) string {
	rep, err := lua.New(p.rdb).Take(context.Background(), lua.TakeArgs{Bucket: p.sp.Bucket("d1"), Queue: p.q, Slots: n,
		Budget: 100, Lease: 30 * time.Second, Maintained: p.sp.TakeMaintained("d1"), MaintainEvery: time.Hour,
		Maintain: maintain, Fair: &p.fk, FairTTL: fairindex.KeyTTL})
	if err != nil {
		p.t.Fatal(err)
	}
	var out []string
	for _, tk := range rep.Tasks {
		out = append(out, p.names[tk.ID])
	}
	return fmt.Sprint(out)
}

func (p *fairPlay) id(name string) string {
	for id, n := range p.names {
		if n == name {
			return id
		}
	}
	p.t.Fatalf("no task %s", name)
	return ""
}

// A retry of a task that was in fair order goes back to fair order at its
// key's turn when the take's maintenance forwards it (its hash's
// shaper_fair), not behind the whole backlog of pending.
func TestFairRetryGoesBackToFairOrder(t *testing.T) {
	ctx := context.Background()
	p := newFairPlay(t)
	rdb, q := p.rdb, p.q
	p.park("A", 20)
	p.park("B", 1)
	if got := p.take(2, false); got != "[A0 B0]" {
		t.Fatalf("took %s, want [A0 B0]", got)
	}
	b0 := p.id("B0")
	if rdb.HGet(ctx, q.Task(b0), "shaper_fair").Val() != "!1|1|1|B" {
		t.Fatalf("B0 taken with shaper_fair %q, want its member without the id", rdb.HGet(ctx, q.Task(b0), "shaper_fair").Val())
	}
	// B0's call failed: asynq's retry, due now
	rdb.LRem(ctx, q.Active(), 1, b0)
	rdb.ZRem(ctx, q.Lease(), b0)
	rdb.ZAdd(ctx, q.Retry(), redis.Z{Score: float64(time.Now().Unix() - 1), Member: b0})
	rdb.HSet(ctx, q.Task(b0), "state", "retry")
	rdb.Del(ctx, p.sp.TakeMaintained("d1")) // this take maintains
	// B's turn is at 1 (after B0's first try), with A1's: ties by key
	if got := p.take(3, true); got != "[A1 B0 A2]" {
		t.Errorf("took %s after the retry was due, want [A1 B0 A2]: B0 back in fair order", got)
	}
}

// A key that arrives while the backlog's keys all have turns at V goes
// before them: its task is parked with "!" and tied turns go in member
// order. A, B and C each have tasks at 0, 1, 2; after A0 B0 C0 A1, V is
// 1 and B1, C1 wait at 1; D's first task starts at 1 too and is taken
// next, not after B1 and C1 (by key, B and C sort before D).
func TestFairNewcomerWinsTies(t *testing.T) {
	p := newFairPlay(t)
	p.park("A", 3)
	p.park("B", 3)
	p.park("C", 3)
	if got := p.take(4, false); got != "[A0 B0 C0 A1]" {
		t.Fatalf("took %s, want [A0 B0 C0 A1]", got)
	}
	p.park("D", 1)
	if got := p.take(3, false); got != "[D0 B1 C1]" {
		t.Errorf("took %s after D arrived, want [D0 B1 C1]: D's first turn, at V, before the tied B1 and C1", got)
	}
}

// A numbered task whose member is gone from fair order (a take of an
// earlier version, which served pending first and found the member's task
// not in the scheduled set, dropped it) goes once fair order has nothing
// left, not after the fair keys' TTL.
func TestFairOrphanGoesWhenFairOrderIsEmpty(t *testing.T) {
	p := newFairPlay(t)
	p.park("A", 2)
	ms := p.rdb.ZRange(context.Background(), p.fk.Parked, 1, 1).Val() // A1's member
	p.rdb.ZRem(context.Background(), p.fk.Parked, ms[0])
	p.rdb.HIncrBy(context.Background(), p.fk.Counts, "A", -1)
	if got := p.take(5, false); got != "[A0 A1]" {
		t.Errorf("took %s, want A0 in fair order, then A1 with nothing left in it", got)
	}
	if n := p.rdb.HLen(context.Background(), p.fk.Pos).Val(); n != 0 {
		t.Errorf("%d numbers left, want 0", n)
	}
}

// A taken task whose slot was wasted (TakeHoldArgs.Again) goes back to
// parked at V, numbered in pending, counted again, and the next take
// takes it first, before the tasks parked behind it.
func TestTakeHoldAgainParksFirstInLine(t *testing.T) {
	ctx := context.Background()
	rdb, _, sp, q, fk, fq, cl := fairRig(t)
	f := &fairindex.Fairness{}
	var ids []string
	for _, key := range []string{"A", "B", "A"} {
		info, err := cl.Enqueue(asynq.NewTask("job", []byte(key)), asynq.Queue(sp.Queue("d1")))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fq.Park(ctx, "d1", f, info.ID, key, 1, time.Time{}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.ID)
	}
	st := lua.New(rdb)
	take := func() string {
		rep, err := st.Take(ctx, lua.TakeArgs{Bucket: sp.Bucket("d1"), Queue: q, Slots: 1, Budget: 100,
			Lease: 30 * time.Second, Maintained: sp.TakeMaintained("d1"), MaintainEvery: time.Hour,
			Fair: &fk, FairTTL: fairindex.KeyTTL})
		if err != nil || len(rep.Tasks) != 1 {
			t.Fatalf("take: %v, %d tasks; want one", err, len(rep.Tasks))
		}
		return rep.Tasks[0].ID
	}
	// A0 (tag 0) and B0 (tag 0) go first; A0's slot is wasted
	first := take()
	if first != ids[0] {
		t.Fatalf("took %s first, want A0 %s", first, ids[0])
	}
	a := lua.TakeHoldArgs{Queue: q, Fair: fk, ID: first, Key: "A", Cost: 1, Weight: 1, TTL: fairindex.KeyTTL, Again: true}
	if ok, err := st.TakeHold(ctx, a); err != nil || !ok {
		t.Fatalf("give back: %v %v, want parked", ok, err)
	}
	if n := rdb.LLen(ctx, q.Active()).Val() + rdb.ZCard(ctx, q.Lease()).Val() + rdb.ZCard(ctx, fk.Held).Val(); n != 0 {
		t.Errorf("%d entries in active, lease and held, want 0", n)
	}
	if !rdb.HExists(ctx, fk.Pos, first).Val() || rdb.HGet(ctx, q.Task(first), "state").Val() != "pending" {
		t.Errorf("given-back task not numbered in pending, or not pending")
	}
	if n := rdb.HGet(ctx, fk.Counts, "A").Val(); n != "2" {
		t.Errorf("counts of A %q, want 2 (A0 again, and A1)", n)
	}
	// A0 is parked at V (0), first among the tasks of that tag (B0, a
	// key that started there too, after it by key), then A1 (1)
	if got := []string{take(), take(), take()}; fmt.Sprint(got) != fmt.Sprint([]string{ids[0], ids[1], ids[2]}) {
		t.Errorf("took %v after the give-back, want A0, B0, A1 %v", got, ids)
	}
}
