package lua_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/shaper-io/shaper/internal/control"
	"github.com/shaper-io/shaper/internal/fairindex"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/redistest"
)

// take.lua on a fair downstream: pending first (a task given back), then
// the parked tasks by start tag (ties: by key), each moved from asynq's
// scheduled set to active under a lease; a paused key's task goes to
// held; V follows the tags; a take that runs out with nothing left in
// fair order lets the fair keys expire within a minute.
func TestTakeFairOrder(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := redistest.Client(t), redistest.Prefix(t)
	sp := keys.New(prefix)
	q, fk := sp.Asynq("d1"), sp.Fair("d1")
	fq := fairindex.New(rdb, prefix)
	cl := asynq.NewClientFromRedisClient(rdb)
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
			id := enqueue(fmt.Sprint(key, i), asynq.ProcessIn(fairindex.Horizon))
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
	rep, err := st.Take(ctx, lua.TakeArgs{Bucket: sp.TakeBucket("d1"), Queue: q, Slots: 20, Budget: 100,
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
	if n := rdb.ZCard(ctx, q.Scheduled()).Val(); n != 2 {
		t.Errorf("%d tasks still scheduled, want C's 2", n)
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
	rep, err = st.Take(ctx, lua.TakeArgs{Bucket: sp.TakeBucket("d1"), Queue: q, Slots: 20, Budget: 100,
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
