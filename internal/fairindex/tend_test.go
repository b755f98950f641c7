package fairindex_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/fairindex"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/redistest"
)

// A tend with tasks parked but none not yet due or held reads only the
// keys waiting (Parked and Later -1) and moves nothing; with a task not
// yet due it is a feed: it reads what waits and moves the task once due.
func TestTendFeedsOnlyWhenSomethingMayMove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := redistest.Client(t), redistest.Prefix(t)
	sp := keys.New(prefix)
	q := fairindex.New(rdb, prefix)
	f := &fairindex.Fairness{}
	aq := sp.Asynq("api")
	for _, key := range []string{"a", "b"} {
		id := key + "-0"
		rdb.HSet(ctx, aq.Task(id), "msg", "x", "state", "pending")
		if err := rdb.LPush(ctx, aq.Pending(), id).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Park(ctx, "api", f, id, key, 1, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := q.Tend(ctx, "api")
	if err != nil {
		t.Fatal(err)
	}
	if st.Parked != -1 || st.Later != -1 || st.Keys != 2 || st.Moved != 0 {
		t.Errorf("tend with 2 keys parked and nothing later: %+v, want Parked and Later -1 (not read), Keys 2, Moved 0", st)
	}
	// c-0 has a ProcessAt: asynq keeps it in its scheduled set
	rdb.HSet(ctx, aq.Task("c-0"), "msg", "x", "state", "scheduled")
	if err := rdb.ZAdd(ctx, aq.Scheduled(), redis.Z{Score: float64(time.Now().Unix() + 1), Member: "c-0"}).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Park(ctx, "api", f, "c-0", "c", 1, time.Now().Add(300*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if st, err = q.Tend(ctx, "api"); err != nil || st.Parked != 2 || st.Later != 1 || st.Keys != 3 {
		t.Fatalf("tend with a task not yet due: %+v (%v), want a feed's counts: 2 parked, 1 later, 3 keys", st, err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := q.Tend(ctx, "api")
		if err == nil && st.Moved == 1 && st.Parked == 3 && st.Later == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after it was due, the task of c not moved by a tend: %+v (%v)", st, err)
		}
	}
	// the due move took it from asynq's scheduled set to pending, numbered
	if p := rdb.LIndex(ctx, aq.Pending(), 0).Val(); p != "c-0" || rdb.ZCard(ctx, aq.Scheduled()).Val() != 0 {
		t.Errorf("pending's head %q, scheduled %d, want c-0 moved to pending", p, rdb.ZCard(ctx, aq.Scheduled()).Val())
	}
	if s := rdb.HGet(ctx, aq.Task("c-0"), "state").Val(); s != "pending" || !rdb.HExists(ctx, sp.Fair("api").Pos, "c-0").Val() {
		t.Errorf("c-0 in state %q, numbered %v; want pending, numbered", s, rdb.HExists(ctx, sp.Fair("api").Pos, "c-0").Val())
	}
}
