package take

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/priority"
	"github.com/shaper-io/shaper/internal/redistest"
)

var weights821, _ = priority.WeightsFrom(map[int]int{1: 8, 3: 2, 5: 1})

// TestTakeEngineWeighted: a downstream with weights 8:2:1 on levels 1, 3
// and 5 and backlogs of 40, 10 and 5, served one at a time, calls them
// 8:2:1 (±1) in every round of 11, and leaves no turns key once the queue
// is drained.
func TestTakeEngineWeighted(t *testing.T) {
	r := newRig(t)
	prio := make([]int, 0, 55)
	for p, n := range map[int]int{1: 40, 3: 10, 5: 5} {
		for range n {
			prio = append(prio, p)
		}
	}
	ids := r.enqueue("d", "job", len(prio))
	r.place("d", ids, prio)
	var mu sync.Mutex
	var order []int
	d := Downstream{Name: "d", InFlight: 1, Priority: true, Weights: weights821, LateTolerance: -1,
		Handler: func(ctx context.Context, t *Task) error {
			mu.Lock()
			defer mu.Unlock()
			order = append(order, t.Priority)
			return nil
		}}
	start(t, r.engine(nil, Config{}, d))
	waitFor(t, 10*time.Second, "every task done", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) == len(prio)
	})
	for k := 11; k <= 55; k += 11 {
		c := map[int]int{}
		for _, p := range order[:k] {
			c[p]++
		}
		rd := k / 11
		for p, w := range map[int]int{1: 8 * rd, 3: 2 * rd, 5: rd} {
			if c[p] < w-1 || c[p] > w+1 {
				t.Errorf("after %d calls: %d of priority %d, want %d±1 (order %v)", k, c[p], p, w, order)
			}
		}
	}
	if n := r.rdb.Exists(context.Background(), r.sp.TakeTurns("d")).Val(); n != 0 {
		t.Errorf("turns key left after the queue drained")
	}
}

// TestTakeWeightedValidate: weights need Priority and each in [1, 1000].
func TestTakeWeightedValidate(t *testing.T) {
	h := func(context.Context, *Task) error { return nil }
	for i, tc := range []struct {
		d    Downstream
		want string
	}{
		{Downstream{Name: "d", Handler: h, Weights: weights821}, "Weights need Priority"},
		{Downstream{Name: "d", Handler: h, Priority: true, Weights: priority.Weights{8, 0, 1, 1, 1}}, "got 0"},
	} {
		if err := tc.d.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("case %d: got %v, want an error with %q", i, err, tc.want)
		}
	}
}

// TestTakeWeightedCommands counts the Redis commands of one take.lua call
// (INFO commandstats on a server of the test's own) with strict and with
// weighted priority, for 1 and 10 slots, over backlogs at levels 1, 3 and
// 5 and at level 5 alone (strict priority's dearest: four empty lists
// before each task). Weighted adds a constant per call (the state's GET
// and SET, and at most one empty pop per level), not a term per task.
func TestTakeWeightedCommands(t *testing.T) {
	rdb := ownRedis(t)
	ctx := context.Background()
	measure := func(name string, w priority.Weights, backlog map[int]int, slots int64) int64 {
		sp := keys.New(name)
		q := sp.Asynq("d")
		cl := asynq.NewClientFromRedisClient(rdb)
		st := lua.New(rdb)
		for p, n := range backlog {
			for range n {
				info, err := cl.Enqueue(asynq.NewTask("job", nil), asynq.Queue(q.Name))
				if err != nil {
					t.Fatal(err)
				}
				if p != priority.Default {
					if _, err := st.PlacePriority(ctx, q, sp.TakePriority("d", p), info.ID, p); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		l := newLane(Config{Keys: sp, LookAhead: time.Second, Lease: 30 * time.Second, Maintain: time.Hour},
			Downstream{Name: "d", Priority: true, Weights: w, InFlight: 1000}.withDefaults())
		a := l.args
		a.Slots = slots
		if _, err := st.Take(ctx, a); err != nil { // loads the script
			t.Fatal(err)
		}
		before, err := redistest.ReadCommandStats(ctx, rdb)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := st.Take(ctx, a)
		if err != nil || int64(len(rep.Tasks)) != slots {
			t.Fatalf("%s: took %d tasks, %v; want %d", name, len(rep.Tasks), err, slots)
		}
		after, err := redistest.ReadCommandStats(ctx, rdb)
		if err != nil {
			t.Fatal(err)
		}
		d := after.Sub(before)
		d["info"]-- // the read of before
		return d.Total()
	}
	for _, bl := range []struct {
		name    string
		backlog map[int]int
	}{{"mixed", map[int]int{1: 40, 3: 40, 5: 40}}, {"level5", map[int]int{5: 40}}} {
		var got [2][2]int64 // [strict, weighted][1 slot, 10 slots]
		for i, w := range []priority.Weights{{}, weights821} {
			for j, slots := range []int64{1, 10} {
				got[i][j] = measure(fmt.Sprintf("%s_%d_%d", bl.name, i, slots), w, bl.backlog, slots)
			}
		}
		t.Logf("%s backlog: commands per take, strict: %d (1 slot), %d (10 slots); weighted: %d, %d",
			bl.name, got[0][0], got[0][1], got[1][0], got[1][1])
		if extra := got[1][0] - got[0][0]; extra > 6 {
			t.Errorf("%s: weighted adds %d commands to a take of 1 slot, want at most 6", bl.name, extra)
		}
		if perTask, strict := got[1][1]-got[1][0], got[0][1]-got[0][0]; perTask > strict {
			t.Errorf("%s: 9 more tasks cost weighted %d commands, strict %d; want no more than strict", bl.name, perTask, strict)
		}
	}
}
