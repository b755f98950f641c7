package lua_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/priority"
	"github.com/shaper-io/shaper/internal/redistest"
)

// weightedRig is one downstream with priority lists and weights 8, 2 and
// 1 on levels 1, 3 and 5 (2 and 4 unnamed: weight 1, and kept empty).
type weightedRig struct {
	t  *testing.T
	sp keys.Space
	cl *asynq.Client
	st *lua.Store
	a  lua.TakeArgs
}

var testWeights, _ = priority.WeightsFrom(map[int]int{1: 8, 3: 2, 5: 1})

func newWeightedRig(t *testing.T, rdb redis.UniversalClient) *weightedRig {
	t.Helper()
	sp := keys.New(redistest.Prefix(t))
	var levels []string
	for _, p := range priority.Levels {
		levels = append(levels, sp.TakePriority("d1", p))
	}
	return &weightedRig{t: t, sp: sp, cl: asynq.NewClientFromRedisClient(rdb), st: lua.New(rdb),
		a: lua.TakeArgs{Bucket: sp.Bucket("d1"), Queue: sp.Asynq("d1"), Budget: 1000, Lease: 30 * time.Second,
			Maintained: sp.TakeMaintained("d1"), MaintainEvery: time.Second, Levels: levels,
			Weights: testWeights, Turns: sp.TakeTurns("d1")}}
}

// add enqueues n tasks of priority p with asynq's Client and places them
// as the producer does.
func (r *weightedRig) add(p, n int) {
	r.t.Helper()
	ctx := context.Background()
	q := r.sp.Asynq("d1")
	for range n {
		info, err := r.cl.Enqueue(asynq.NewTask("job", nil), asynq.Queue(q.Name))
		if err != nil {
			r.t.Fatal(err)
		}
		if p == priority.Default {
			continue
		}
		if res, err := r.st.PlacePriority(ctx, q, r.sp.TakePriority("d1", p), info.ID, p); err != nil || res != lua.PlaceMoved {
			r.t.Fatalf("place %s at %d: %v, %v", info.ID, p, res, err)
		}
	}
}

// takeN takes slots tasks with st (the rig's store when nil) and returns
// their priorities.
func (r *weightedRig) takeN(st *lua.Store, slots int) []int {
	r.t.Helper()
	if st == nil {
		st = r.st
	}
	a := r.a
	a.Slots = int64(slots)
	rep, err := st.Take(context.Background(), a)
	if err != nil {
		r.t.Fatal(err)
	}
	var got []int
	for _, tt := range rep.Tasks {
		got = append(got, tt.Priority)
	}
	return got
}

// takeAll takes until the queue is empty, in takes of 1, 2, 3, 1, 2, 3...
// slots, and returns the priorities in take order. A take that comes back
// with fewer tasks than it asked for while tasks wait fails the test.
func (r *weightedRig) takeAll(stores []*lua.Store, total int) []int {
	r.t.Helper()
	var got []int
	for i := 0; len(got) < total; i++ {
		ask := min(i%3+1, total-len(got))
		one := r.takeN(stores[i%len(stores)], ask)
		if len(one) != ask {
			r.t.Fatalf("take %d: got %d tasks with %d waiting, want %d (work-conserving)", i, len(one), total-len(got), ask)
		}
		got = append(got, one...)
	}
	if rest := r.takeN(nil, 1); len(rest) != 0 {
		r.t.Fatalf("after %d tasks: took %v more, want none", total, rest)
	}
	return got
}

func counts(prios []int) map[int]int {
	c := map[int]int{}
	for _, p := range prios {
		c[p]++
	}
	return c
}

// TestTakeWeightedSplit: with backlogs of 100, 20 and 5 tasks at levels 1,
// 3 and 5 and weights 8:2:1, every round of 11 takes splits 8:2:1 (±1)
// while all three wait; once level 5 is empty, rounds of 10 split 8:2; then
// level 1 takes every slot. Levels 2 and 4 (weight 1, no tasks) never hold
// a turn. The split is the same whether one client takes or two take in
// turn (the state is in Redis), and the state key has a TTL while tasks
// wait and is deleted when the queue drains.
func TestTakeWeightedSplit(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	var seqs [2][]int
	for run, stores := range [][]*lua.Store{{lua.New(rdb)}, {lua.New(redistest.Client(t)), lua.New(redistest.Client(t))}} {
		r := newWeightedRig(t, rdb)
		r.add(1, 100)
		r.add(priority.Default, 20)
		r.add(5, 5)
		first := r.takeN(nil, 3)
		if len(first) != 3 {
			t.Fatalf("run %d: first take got %v, want 3 tasks", run, first)
		}
		ttl := rdb.PTTL(context.Background(), r.a.Turns).Val()
		if ttl <= 50*time.Second || ttl > 60*time.Second {
			t.Errorf("run %d: turns TTL %v while tasks wait, want (50s, 60s]", run, ttl)
		}
		seqs[run] = append(first, r.takeAll(stores, 125-len(first))...)
		checkRounds(t, seqs[run])
		if n := rdb.Exists(context.Background(), r.a.Turns).Val(); n != 0 {
			t.Errorf("run %d: turns key exists after the queue drained, want it deleted", run)
		}
	}
	if fmt.Sprint(seqs[0]) != fmt.Sprint(seqs[1]) {
		t.Errorf("two clients in turn took\n%v\none client took\n%v\nwant the same order", seqs[1], seqs[0])
	}
}

// checkRounds checks the split of seq at the end of each round: rounds
// of 11 (8:2:1) up to 55 takes, rounds of 10 (8:2) up to 105, then
// priority 1 alone.
func checkRounds(t *testing.T, seq []int) {
	t.Helper()
	for k := 11; k <= len(seq); k++ {
		var want map[int]int
		switch {
		case k <= 55 && k%11 == 0:
			r := k / 11
			want = map[int]int{1: 8 * r, 3: 2 * r, 5: r}
		case k > 55 && k <= 105 && (k-55)%10 == 0:
			r := (k - 55) / 10
			want = map[int]int{1: 40 + 8*r, 3: 10 + 2*r, 5: 5}
		default:
			continue
		}
		got := counts(seq[:k])
		for p, w := range want {
			if d := got[p] - w; d < -1 || d > 1 {
				t.Errorf("after %d takes: %d of priority %d, want %d±1 (counts %v)", k, got[p], p, w, got)
			}
		}
	}
	if got, want := counts(seq), map[int]int{1: 100, 3: 20, 5: 5}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("taken %v, want %v", got, want)
	}
}

// TestTakeWeightedArrival: levels 3 and 5 have backlogs; a task of
// priority 1 that arrives is taken behind at most one take of each other
// level with tasks (the bound: the sum over them of floor(w_j/w_1) + 1 =
// 2), not behind their backlog. Level 1 is not credited for its idle
// spell: a batch that arrives then gets its share, 8 of the next 11
// (±1), not every take. A downstream without weights writes no state.
func TestTakeWeightedArrival(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	r := newWeightedRig(t, rdb)
	r.add(priority.Default, 40)
	r.add(5, 20)
	r.takeN(nil, 7)
	for i := range 3 {
		r.add(1, 1)
		var got []int
		for len(got) < 4 {
			got = append(got, r.takeN(nil, 1)...)
		}
		if at := slices.Index(got, 1); at < 0 || at > 2 {
			t.Errorf("arrival %d: priority 1 at position %d of the next takes %v, want within the first 3", i, at, got)
		}
	}
	r.takeN(nil, 30) // level 1 idle while 3 and 5 take 30 turns
	r.add(1, 16)
	if got := counts(r.takeN(nil, 11)); got[1] < 7 || got[1] > 9 {
		t.Errorf("after an idle spell: next 11 takes split %v, want 8±1 of priority 1", got)
	}

	strict := newWeightedRig(t, rdb)
	strict.a.Weights, strict.a.Turns = priority.Weights{}, ""
	strict.add(5, 2)
	strict.add(1, 1)
	if got := strict.takeN(nil, 3); fmt.Sprint(got) != "[1 5 5]" {
		t.Errorf("strict: took %v, want [1 5 5]", got)
	}
	if n := rdb.Exists(context.Background(), strict.sp.TakeTurns("d1")).Val(); n != 0 {
		t.Errorf("strict take wrote the turns key")
	}
}

// TestTakeWeightedArgs: weights out of range, or without the priority
// lists or the turns key, are refused before Redis is asked.
func TestTakeWeightedArgs(t *testing.T) {
	t.Parallel()
	r := newWeightedRig(t, redistest.Client(t))
	for i, tc := range []struct {
		mod  func(a *lua.TakeArgs)
		want string
	}{
		{func(a *lua.TakeArgs) { a.Weights[2] = 0 }, "weight must be an integer from 1 to 1000, got 0"},
		{func(a *lua.TakeArgs) { a.Weights[0] = 1001 }, "got 1001"},
		{func(a *lua.TakeArgs) { a.Turns = "" }, "need the priority lists and Turns"},
	} {
		a := r.a
		tc.mod(&a)
		if _, err := r.st.Take(context.Background(), a); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("case %d: got %v, want an error with %q", i, err, tc.want)
		}
	}
}
