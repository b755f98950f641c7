package fairindex_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/control"
	"github.com/shaper-io/shaper/internal/fairindex"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// A paused key's tasks leave fair order for the held set as takes reach
// them, and the other keys' tasks are taken past them; Resume moves them
// back a batch at a time; a feed moves back, a few per call, the held
// tasks of a key no longer paused (a resume that did not run). Counted
// in Redis: the tasks take.lua takes, the held set's size.
func TestPausedKeyHeldAndResumed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := redistest.Client(t), redistest.Prefix(t)
	sp := keys.New(prefix)
	q := fairindex.New(rdb, prefix)
	ctl := control.New(rdb, prefix)
	f := &fairindex.Fairness{}
	aq := sp.Asynq("api")
	park := func(key string, n int) {
		for i := range n {
			id := fmt.Sprintf("%s-%d", key, i)
			rdb.HSet(ctx, aq.Task(id), "msg", "x", "state", "pending")
			if err := rdb.LPush(ctx, aq.Pending(), id).Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := q.Park(ctx, "api", f, id, key, 1, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// take takes up to n tasks, as a dispatcher's take does, and counts
	// them by key
	store, fk := lua.New(rdb), sp.Fair("api")
	take := func(n int64) map[string]int {
		rep, err := store.Take(ctx, lua.TakeArgs{Bucket: sp.Bucket("api"), Queue: sp.Asynq("api"), Slots: n,
			Budget: 1 << 20, Lease: time.Minute, Maintained: sp.TakeMaintained("api"), MaintainEvery: time.Hour,
			Fair: &fk, FairTTL: fairindex.KeyTTL})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, tk := range rep.Tasks {
			got[strings.SplitN(tk.ID, "-", 2)[0]]++
		}
		return got
	}
	held := func() int64 { return rdb.ZCard(ctx, sp.Fair("api").Held).Val() }

	if err := ctl.SetKeyPaused(ctx, "api", "a", true); err != nil {
		t.Fatal(err)
	}
	park("a", 30)
	park("b", 10)
	if got := take(20); got["a"] != 0 || got["b"] != 10 {
		t.Errorf("paused a: took %v, want b's 10 and none of a", got)
	}
	if h := held(); h != 30 {
		t.Errorf("held %d tasks, want a's 30", h)
	}

	// Resume in batches of 7: all 30 back in fair order, and taken
	if err := ctl.SetKeyPaused(ctx, "api", "a", false); err != nil {
		t.Fatal(err)
	}
	moved := 0
	for {
		n, err := q.Resume(ctx, "api", "a", 7)
		if err != nil {
			t.Fatal(err)
		}
		moved += n
		if n < 7 {
			break
		}
	}
	if moved != 30 || held() != 0 {
		t.Errorf("resume moved %d, %d still held; want 30 and none", moved, held())
	}
	if got := take(40); got["a"] != 30 {
		t.Errorf("took %v after the resume, want a's 30", got)
	}

	// a pause whose resume never ran: clearing the control alone, feeds
	// bring the tasks back 16 a call
	if err := ctl.SetKeyPaused(ctx, "api", "c", true); err != nil {
		t.Fatal(err)
	}
	park("c", 20)
	if got := take(20); len(got) != 0 {
		t.Errorf("took %v of the paused c, want none", got)
	}
	before := held()
	if err := ctl.ClearKey(ctx, "api", "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Feed(ctx, "api"); err != nil {
		t.Fatal(err)
	}
	if after := held(); before == 0 || after != max(before-16, 0) {
		t.Errorf("held %d before a feed of a key no longer paused, %d after; want 16 fewer", before, after)
	}
	for range 5 {
		if _, err := q.Feed(ctx, "api"); err != nil {
			t.Fatal(err)
		}
	}
	if h := held(); h != 0 {
		t.Errorf("%d still held after feeds, want none", h)
	}
	if ttl := rdb.PTTL(ctx, sp.Fair("api").Controls).Val(); ttl <= 0 && rdb.Exists(ctx, sp.Fair("api").Controls).Val() == 1 {
		t.Errorf("the controls hash has no TTL")
	}
}
