package lua_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/control"
	"github.com/shaper-io/shaper/internal/fairindex"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/priority"
	"github.com/shaper-io/shaper/limiters"
)

// fairReserveRig is a fair downstream whose take reserves: tasks parked by
// key (park), a take at a given time (take), and names for the ids.
type fairReserveRig struct {
	t     *testing.T
	a     lua.TakeArgs
	st    *lua.Store
	names map[string]string
	park  func(key string, n int)
	ctl   *control.Store
	rdb   redis.UniversalClient
	kc    string // the key ceilings' prefix
	fq    *fairindex.Queue
	clock time.Time // the fair index's clock (its parks and feeds)
	sp    keys.Space
}

func newFairReserveRig(t *testing.T, interval time.Duration) *fairReserveRig {
	ctx := context.Background()
	rdb, prefix, sp, q, fk, fq, cl := fairRig(t)
	f := &fairindex.Fairness{}
	r := &fairReserveRig{t: t, st: lua.New(rdb), names: map[string]string{}, ctl: control.New(rdb, prefix),
		rdb: rdb, kc: sp.KeyCeiling("d1", ""), fq: fq, clock: time.Now(), sp: sp}
	fq.SetNow(func() time.Time { return r.clock })
	seq := map[string]int{}
	r.park = func(key string, n int) {
		for range n {
			name := fmt.Sprint(key, seq[key])
			seq[key]++
			info, err := cl.Enqueue(asynq.NewTask("job", []byte(name)), asynq.Queue(sp.Queue("d1")))
			if err != nil {
				t.Fatal(err)
			}
			r.names[info.ID] = name
			if _, err := fq.Park(ctx, "d1", f, info.ID, key, 1, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	r.a = lua.TakeArgs{Bucket: sp.Bucket("d1"), Queue: q, LookAhead: time.Second.Microseconds(), Slots: 50,
		Budget: 100, Lease: 30 * time.Second, Maintained: sp.TakeMaintained("d1"), MaintainEvery: time.Hour,
		Fair: &fk, FairTTL: fairindex.KeyTTL,
		Reserve: &lua.BucketArgs{Interval: interval.Microseconds(), Answers: lua.AnswerKeys{Announced: sp.Announced("d1"),
			Issued: sp.Issued("d1")}, Claims: sp.PriorityClaims("d1")}}
	return r
}

// take takes at now (µs) and returns the reply and "name@slot-t0 (ms)".
func (r *fairReserveRig) take(now, t0 int64) (lua.TakeReply, string) {
	r.t.Helper()
	a := r.a
	ra := *a.Reserve
	ra.Now, a.Now, a.Reserve = now, now, &ra
	rep, err := r.st.Take(context.Background(), a)
	if err != nil {
		r.t.Fatal(err)
	}
	var out []string
	for _, tk := range rep.Tasks {
		out = append(out, fmt.Sprintf("%s@%d", r.names[tk.ID], (tk.Slot-t0)/1000))
	}
	return rep, fmt.Sprint(out)
}

// A fair downstream's take reserves the slots of what it moves, in fair
// order: the task at the tail not in fair order first, then the parked
// tasks by start tag, each with its own slot, and how many of its key's
// tasks still wait; a paused key's tasks go to held and take no slot.
func TestTakeReservesInFairOrder(t *testing.T) {
	r := newFairReserveRig(t, 10*time.Millisecond)
	ctx := context.Background()
	if err := r.ctl.SetKeyPaused(ctx, "d1", "C", true); err != nil {
		t.Fatal(err)
	}
	r.park("A", 4)
	r.park("B", 2)
	r.park("C", 2)
	t0 := time.Now().UnixMicro()
	rep, got := r.take(t0, t0)
	if want := "[A0@0 B0@10 A1@20 B1@30 A2@40 A3@50]"; rep.Status != lua.TakeTaken || got != want {
		t.Fatalf("status %d, taken %s; want %s", rep.Status, got, want)
	}
	if res := rep.Reservation; res == nil || res.Reserved != 6 {
		t.Fatalf("reservation %+v; want 6 slots", res)
	}
	// each task says how many of its key's tasks still wait after it
	var left []int64
	for _, tk := range rep.Tasks {
		left = append(left, tk.Left)
	}
	if fmt.Sprint(left) != "[3 1 2 0 1 0]" {
		t.Errorf("left %v; want [3 1 2 0 1 0]", left)
	}
	rep, got = r.take(t0+100000, t0)
	if rep.Status != lua.TakeEmpty || got != "[]" {
		t.Errorf("second take: status %d, taken %s; want empty (C is paused)", rep.Status, got)
	}
}

// A key ceiling decided at the take: a ceilinged key takes one slot a
// take, one at or after its tat, and its tat becomes the slot plus its
// interval (stretched by the late tolerance: 100ms + 0.5ms); the key's
// other tasks the take meets go to later, due at its ceiling's pace, and
// rejoin fair order when a feed finds them due. An operator's rate for a
// key comes before the default; a tat another process moved holds its
// key until then, and while every key waiting is held nothing moves and
// the reply says when the first may go.
func TestTakeReserveKeepsKeyCeilings(t *testing.T) {
	r := newFairReserveRig(t, 10*time.Millisecond)
	ctx := context.Background()
	prefix, rdb, fk := r.kc, r.rdb, r.a.Fair
	r.a.Ceiling = &lua.TakeCeiling{Prefix: prefix, Interval: 100 * time.Millisecond, Tolerance: 5 * time.Millisecond,
		Margin: time.Second}
	t0 := r.clock.UnixMicro()
	r.park("A", 3)
	r.park("B", 2)
	at := func(us int64) int64 {
		r.clock = time.UnixMicro(t0 + us)
		return t0 + us
	}
	feed := func(us int64) {
		at(us)
		if _, err := r.fq.Feed(ctx, "d1"); err != nil {
			t.Fatal(err)
		}
	}
	_, got := r.take(at(0), t0)
	if want := "[A0@0 B0@10]"; got != want {
		t.Fatalf("first take: %s; want %s (one slot a key)", got, want)
	}
	if tat := rdb.Get(ctx, prefix+"A").Val(); tat != fmt.Sprint(t0+100500) {
		t.Errorf("A's tat %s; want slot + 100.5ms = %d", tat, t0+100500)
	}
	if n, l := rdb.ZCard(ctx, fk.Parked).Val(), rdb.ZCard(ctx, fk.Later).Val(); n != 0 || l != 3 {
		t.Fatalf("parked %d, later %d; want 0 and 3 (A1, A2, B1)", n, l)
	}
	for _, k := range []string{fk.Later, fk.NotBefore, fk.Tags} {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("%s has no TTL (%v) after the take wrote it", k, ttl)
		}
	}
	// nothing may go before A1, due at A's tat (in ms, rounded up): the
	// reply says when
	dueA1 := (t0 + 100500 + 999) / 1000 * 1000
	if rep, got := r.take(at(50000), t0); rep.Status != lua.TakeEarly || got != "[]" || rep.Next != dueA1 {
		t.Fatalf("take at +50ms: status %d, taken %s, next +%d; want early until A1 is due (+%d)",
			rep.Status, got, rep.Next-t0, dueA1-t0)
	}
	// the take itself gives A1 its turn once due (no feed between)
	if _, got = r.take(at(102000), t0); got != "[A1@102]" {
		t.Fatalf("take at +102ms: %s; want [A1@102]", got)
	}
	if ttl := rdb.PTTL(ctx, fk.Parked).Val(); ttl <= 0 && rdb.Exists(ctx, fk.Parked).Val() == 1 {
		t.Errorf("parked has no TTL (%v) after the take's feed", ttl)
	}
	// an operator's rate for B: 1/s, from its next slot on
	if err := r.ctl.SetKeyRate(ctx, "d1", "B", limiters.Limit{Rate: 1, Period: time.Second}); err != nil {
		t.Fatal(err)
	}
	feed(112000)
	if _, got = r.take(t0+112000, t0); got != "[B1@112]" {
		t.Fatalf("take at +112ms: %s; want [B1@112]", got)
	}
	if tat := rdb.Get(ctx, prefix+"B").Val(); tat != fmt.Sprint(t0+112000+1005000) {
		t.Errorf("B's tat %s; want its slot + 1.005s (its operator rate)", tat)
	}
	// another process's take moved A's tat to +400ms: it holds A2, due
	// at +201.5ms
	rdb.Set(ctx, prefix+"A", fmt.Sprint(t0+400000), time.Minute)
	feed(210000)
	rep, got := r.take(t0+210000, t0)
	if rep.Status != lua.TakeEarly || got != "[]" || rep.Next != t0+400000 {
		t.Fatalf("take at +210ms: status %d, taken %s, next +%d; want early until A's tat (+400000)", rep.Status, got, rep.Next-t0)
	}
	if _, got = r.take(at(400000), t0); got != "[A2@400]" {
		t.Fatalf("take at +400ms: %s; want [A2@400]", got)
	}
	// A's next two wait in later, spaced by A's ceiling; a resume (the
	// key's ceiling changed) makes them due at once
	r.park("A", 2)
	if rep, got = r.take(at(401000), t0); rep.Status != lua.TakeEarly || got != "[]" {
		t.Fatalf("take at +401ms: status %d, taken %s; want early", rep.Status, got)
	}
	var late []redis.Z
	for _, z := range rdb.ZRangeWithScores(ctx, fk.Later, 0, -1).Val() {
		if strings.Contains(z.Member.(string), "|A") {
			late = append(late, z)
		}
	}
	if len(late) != 2 || int64(late[0].Score) < (t0+500500)/1000 || late[1].Score-late[0].Score < 100.5 {
		t.Fatalf("A's in later %v; want 2, from A's tat on, 100.5ms apart", late)
	}
	if _, err := r.fq.Resume(ctx, "d1", "A", 10); err != nil {
		t.Fatal(err)
	}
	for _, z := range late {
		if due := rdb.ZScore(ctx, fk.Later, z.Member.(string)).Val(); int64(due) != r.clock.UnixMilli() {
			t.Errorf("%s due at %v after the resume; want now (%d)", z.Member, int64(due), r.clock.UnixMilli())
		}
	}
	if rdb.HExists(ctx, fk.NotBefore, "A").Val() {
		t.Errorf("A's spacing kept after the resume; want it afresh")
	}
}

// A task at the tail of pending not in fair order (enqueued and not
// parked yet, or by asynq's own Client) keeps its key's ceiling too: its
// key is its admission key (header "shaper-key") when it has no fair
// member yet.
func TestTakeReserveCeilsTasksNotInFairOrder(t *testing.T) {
	r := newFairReserveRig(t, 10*time.Millisecond)
	ctx := context.Background()
	r.a.Ceiling = &lua.TakeCeiling{Prefix: r.kc, Interval: 100 * time.Millisecond, Margin: time.Second}
	t0 := r.clock.UnixMicro()
	r.park("A", 1)
	if _, got := r.take(t0, t0); got != "[A0@0]" {
		t.Fatalf("first take: %s; want [A0@0]", got)
	}
	cl := asynq.NewClientFromRedisClient(r.rdb)
	info, err := cl.EnqueueContext(ctx, asynq.NewTaskWithHeaders("job", []byte("A-plain"), map[string]string{"shaper-key": "A"}),
		asynq.Queue(r.a.Queue.Name))
	if err != nil {
		t.Fatal(err)
	}
	r.names[info.ID] = "Aplain"
	if rep, got := r.take(t0+10000, t0); got != "[]" || rep.Status == lua.TakeTaken {
		t.Fatalf("take at +10ms: status %d, %s; want nothing (A's tat is +100ms)", rep.Status, got)
	}
	if _, got := r.take(t0+100000, t0); got != "[Aplain@100]" {
		t.Fatalf("take at +100ms: %s; want [Aplain@100]", got)
	}
}

// A key with a ceiling of its own (the file's key_rates, in the HASH
// EnsureKeyRates writes and TakeCeiling.Rates names) is spaced by it,
// the others by the default. While the HASH is missing every key gets
// the fallback, the slowest; a second EnsureKeyRates of the same map
// writes nothing, a call after a flush writes it again.
func TestTakeReserveKeyCeilingsOfTheirOwn(t *testing.T) {
	r := newFairReserveRig(t, 10*time.Millisecond)
	ctx := context.Background()
	own := map[string]time.Duration{"B|x": 300 * time.Millisecond, "C": 50 * time.Millisecond}
	rates := r.sp.Fair("d1").Rates
	ensure := func(want bool) {
		t.Helper()
		written, err := r.st.EnsureKeyRates(ctx, rates, lua.KeyRatesVersion(own), time.Hour, own)
		if err != nil || written != want {
			t.Fatalf("EnsureKeyRates: written %v (%v); want %v", written, err, want)
		}
		if ttl := r.rdb.PTTL(ctx, rates).Val(); ttl <= 0 {
			t.Errorf("the key_rates HASH has TTL %v; want one", ttl)
		}
	}
	ensure(true)
	ensure(false)
	r.a.Ceiling = &lua.TakeCeiling{Prefix: r.kc, Interval: 100 * time.Millisecond, Margin: time.Second,
		Rates: rates, Fallback: 300 * time.Millisecond}
	t0 := r.clock.UnixMicro()
	r.park("A", 1)
	r.park("B|x", 1)
	if _, got := r.take(t0, t0); got != "[A0@0 B|x0@10]" {
		t.Fatalf("take: %s; want [A0@0 B|x0@10]", got)
	}
	for key, want := range map[string]int64{"A": t0 + 100000, "B|x": t0 + 10000 + 300000} {
		if tat := r.rdb.Get(ctx, r.kc+key).Val(); tat != fmt.Sprint(want) {
			t.Errorf("%s's tat %s; want %d", key, tat, want)
		}
	}
	// the HASH flushed: C (50ms of its own) gets the fallback, 300ms
	must(t, r.rdb.Del(ctx, rates).Err())
	r.park("C", 1)
	if _, got := r.take(t0+1000000, t0); got != "[C0@1000]" {
		t.Fatalf("take after a flush: %s; want [C0@1000]", got)
	}
	if tat := r.rdb.Get(ctx, r.kc+"C").Val(); tat != fmt.Sprint(t0+1000000+300000) {
		t.Errorf("C's tat after a flush %s; want the fallback's, %d", tat, t0+1300000)
	}
	ensure(true)
}

// A cap per key decided at the take (TakeLeases.KeyCap): a key's tasks go
// while it has places among the calls in flight (its leases, member
// token+id+"|"+key, and its tasks taken before in the same take); its
// other parked tasks the take meets wait in held, out of everyone's way,
// and the release of one of its leases (concurrency.lua, with CapHeld)
// brings back as many as it freed, at their turns, so its next task goes
// at the next take. A lease that expires frees its place as well.
func TestTakeReserveHoldsAKeyAtItsCap(t *testing.T) {
	r := newFairReserveRig(t, 10*time.Millisecond)
	ctx, sp := context.Background(), r.sp
	l := &lua.TakeLeases{Leases: sp.Leases("d1"), Counts: sp.LeaseCounts("d1"), KeyCap: 2, Lease: 30 * time.Second, Token: "tk:"}
	r.a.Leases = l
	held := &lua.CapHeld{Held: r.a.Fair.Held, Parked: r.a.Fair.Parked, TTL: fairindex.KeyTTL}
	r.park("A", 5)
	r.park("B", 1)
	t0 := time.Now().UnixMicro()
	rep, got := r.take(t0, t0)
	if want := "[A0@0 B0@10 A1@20]"; got != want {
		t.Fatalf("first take: %s; want %s (A at its cap of 2)", got, want)
	}
	members := map[string]string{}
	for _, tk := range rep.Tasks {
		members[r.names[tk.ID]] = l.LeaseMember(tk.ID, tk.LeaseKey)
	}
	if n := r.rdb.HGet(ctx, l.Counts, "A").Val(); n != "2" {
		t.Errorf("A's count %q; want 2", n)
	}
	if n := r.rdb.ZCard(ctx, held.Held).Val(); n != 3 {
		t.Errorf("held: %d; want A's 3 others", n)
	}
	if ttl := r.rdb.PTTL(ctx, held.Held).Val(); ttl <= 0 {
		t.Errorf("held's TTL %v; want one", ttl)
	}
	if rep, got = r.take(t0+100000, t0); rep.Status != lua.TakeEmpty || got != "[]" {
		t.Fatalf("second take: status %d, %s; want empty (A at its cap)", rep.Status, got)
	}
	a := lua.LeaseArgs{KeyCap: 2, Held: held}
	if n, err := r.st.ReleaseLeases(ctx, l.Leases, l.Counts, a, []string{members["B0"], members["A0"]}); err != nil || n != 2 {
		t.Fatalf("release: %d, %v", n, err)
	}
	if n := r.rdb.ZCard(ctx, held.Held).Val(); n != 2 {
		t.Errorf("held after a release of A: %d; want 2 (one back)", n)
	}
	if _, got = r.take(t0+200000, t0); got != "[A2@200]" {
		t.Fatalf("after a release: %s; want [A2@200]", got)
	}
	// A1's and A2's leases expire: the take frees both places and brings
	// back A's last two
	if _, got = r.take(t0+30300000, t0); got != "[A3@30300 A4@30310]" {
		t.Fatalf("after the leases expired: %s; want [A3@30300 A4@30310]", got)
	}
	if n := r.rdb.Exists(ctx, held.Held).Val(); n != 0 {
		t.Errorf("held still exists")
	}
}

// Tasks held at a cap per key go back to fair order at the maintenance of
// a take without one (key_concurrency removed from the downstream), so
// none waits for a call's end that no take counts any more.
func TestTakeWithoutAKeyCapReleasesHeldTasks(t *testing.T) {
	r := newFairReserveRig(t, 10*time.Millisecond)
	ctx, sp := context.Background(), r.sp
	r.a.Leases = &lua.TakeLeases{Leases: sp.Leases("d1"), Counts: sp.LeaseCounts("d1"), KeyCap: 1, Lease: 30 * time.Second, Token: "tk:"}
	r.park("A", 3)
	t0 := time.Now().UnixMicro()
	if _, got := r.take(t0, t0); got != "[A0@0]" {
		t.Fatalf("with a cap of 1: %s; want [A0@0]", got)
	}
	if n := r.rdb.ZCard(ctx, r.a.Fair.Held).Val(); n != 2 {
		t.Fatalf("held: %d; want 2", n)
	}
	r.a.Leases, r.a.Maintain = nil, true
	must(t, r.rdb.Del(ctx, r.a.Maintained).Err())
	if _, got := r.take(t0+100000, t0); got != "[A1@100 A2@110]" {
		t.Fatalf("without a cap: %s; want [A1@100 A2@110]", got)
	}
}

// A fair downstream with strict priority reserves at the take in
// priority order: the tails of levels 1 and 2, then pending's tasks in
// fair order, then the tails of levels 4 and 5. A list's run stops at a
// task whose key (its "shaper-key" header) is at its ceiling, which stays
// that list's tail while the take goes on with the next list.
func TestTakeReservesFairOrderWithPriorities(t *testing.T) {
	r := newFairReserveRig(t, 10*time.Millisecond)
	ctx, sp := context.Background(), r.sp
	var levels []string
	for _, p := range priority.Levels {
		levels = append(levels, sp.TakePriority("d1", p))
	}
	r.a.Levels = levels
	own := map[string]time.Duration{"X": time.Second}
	if _, err := r.st.EnsureKeyRates(ctx, sp.Fair("d1").Rates, lua.KeyRatesVersion(own), time.Hour, own); err != nil {
		t.Fatal(err)
	}
	r.a.Ceiling = &lua.TakeCeiling{Prefix: r.kc, Rates: sp.Fair("d1").Rates, Fallback: time.Second, Margin: time.Second}
	cl := asynq.NewClientFromRedisClient(r.rdb)
	q := sp.Asynq("d1")
	place := func(p int, key, name string) {
		info, err := cl.Enqueue(asynq.NewTaskWithHeaders("job", nil, map[string]string{"shaper-key": key}), asynq.Queue(q.Name))
		must(t, err)
		r.names[info.ID] = name
		if res, err := r.st.PlacePriority(ctx, q, sp.TakePriority("d1", p), info.ID, p); err != nil || res != lua.PlaceMoved {
			t.Fatalf("place %s: %v, %v", name, res, err)
		}
	}
	place(5, "Z", "P5")
	r.park("A", 2)
	r.park("B", 1)
	place(1, "X", "P1x")
	place(1, "X", "P1x'")
	place(2, "Y", "P2")
	t0 := time.Now().UnixMicro()
	_, got := r.take(t0, t0)
	if want := "[P1x@0 P2@10 A0@20 B0@30 A1@40 P5@50]"; got != want {
		t.Fatalf("take: %s; want %s (X's second at level 1 waits for its ceiling)", got, want)
	}
	if _, got = r.take(t0+1100000, t0); got != "[P1x'@1100]" {
		t.Fatalf("a second later: %s; want [P1x'@1100]", got)
	}
}
