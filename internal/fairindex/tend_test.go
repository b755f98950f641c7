package fairindex_test

import (
	"context"
	"testing"
	"time"

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
	for _, key := range []string{"a", "b"} {
		id := key + "-0"
		if err := rdb.ZAdd(ctx, sp.Asynq("api").Scheduled(), redisZ(id)).Err(); err != nil {
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
	if err := rdb.ZAdd(ctx, sp.Asynq("api").Scheduled(), redisZ("c-0")).Err(); err != nil {
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
}
