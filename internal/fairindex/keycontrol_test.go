package fairindex_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/control"
	"github.com/shaper-io/shaper/internal/fairindex"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// A paused key's tasks leave fair order for the held set as promotion
// reaches them, and the other keys' tasks are promoted past them; Resume
// moves them back a batch at a time; a feed moves back, a few per call,
// the held tasks of a key no longer paused (a resume that did not run).
// Counted in Redis: pending's members, the held set's size.
func TestPausedKeyHeldAndResumed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := redistest.Client(t), redistest.Prefix(t)
	sp := keys.New(prefix)
	q := fairindex.New(rdb, prefix)
	ctl := control.New(rdb, prefix)
	rate := limiters.PerSecond(100) // target: 20 in pending (fairindex.Pending of releases)
	f := &fairindex.Fairness{}
	scheduled := sp.Asynq("api").Scheduled()
	park := func(key string, n int) {
		for i := range n {
			id := fmt.Sprintf("%s-%d", key, i)
			if err := rdb.ZAdd(ctx, scheduled, redisZ(id)).Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := q.Park(ctx, "api", rate, f, id, key, 1, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	pendingOf := func(key string) int {
		ids, err := rdb.LRange(ctx, sp.Asynq("api").Pending(), 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, id := range ids {
			if len(id) > len(key) && id[:len(key)+1] == key+"-" {
				n++
			}
		}
		return n
	}
	held := func() int64 { return rdb.ZCard(ctx, sp.Fair("api").Held).Val() }

	if err := ctl.SetKeyPaused(ctx, "api", "a", true); err != nil {
		t.Fatal(err)
	}
	park("a", 30)
	park("b", 10)
	if _, err := q.Feed(ctx, "api", rate); err != nil {
		t.Fatal(err)
	}
	if a, b := pendingOf("a"), pendingOf("b"); a != 0 || b != 10 {
		t.Errorf("paused a: %d of a and %d of b in pending, want 0 and 10", a, b)
	}
	if h := held(); h != 30 {
		t.Errorf("held %d tasks, want a's 30", h)
	}

	// Resume in batches of 7: all 30 back in fair order, and promoted as
	// pending has room (target 20, b's 10 there)
	if err := ctl.SetKeyPaused(ctx, "api", "a", false); err != nil {
		t.Fatal(err)
	}
	moved := 0
	for {
		n, err := q.Resume(ctx, "api", rate, "a", 7)
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
	if a := pendingOf("a"); a != 10 {
		t.Errorf("%d of a in pending after the resume, want 10 (pending's room)", a)
	}

	// a pause whose resume never ran: clearing the control alone, feeds
	// bring the tasks back 16 a call
	if err := ctl.SetKeyPaused(ctx, "api", "c", true); err != nil {
		t.Fatal(err)
	}
	park("c", 20)
	// the workers take what pending holds, so promotion runs again
	if err := rdb.Del(ctx, sp.Asynq("api").Pending()).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Feed(ctx, "api", rate); err != nil {
		t.Fatal(err)
	}
	before := held()
	if err := ctl.ClearKey(ctx, "api", "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Feed(ctx, "api", rate); err != nil {
		t.Fatal(err)
	}
	if after := held(); before == 0 || after != max(before-16, 0) {
		t.Errorf("held %d before a feed of a key no longer paused, %d after; want 16 fewer", before, after)
	}
	for range 5 {
		if _, err := q.Feed(ctx, "api", rate); err != nil {
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

func redisZ(id string) redis.Z {
	return redis.Z{Score: float64(time.Now().Add(fairindex.Horizon).Unix()), Member: id}
}
