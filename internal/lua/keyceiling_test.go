package lua_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/redistest"
)

// ceilingRig runs keyceiling.lua on one downstream's tat keys.
type ceilingRig struct {
	t     *testing.T
	st    *lua.Store
	space keys.Space
}

func newCeilingRig(t *testing.T) *ceilingRig {
	return &ceilingRig{t: t, st: lua.New(redistest.Client(t)), space: keys.New(redistest.Prefix(t))}
}

// give hands slots (µs) to the candidates' keys (in order) at now (µs)
// with interval iv (µs); it returns the key given each slot ("" none) and
// each key's tat after the call.
func (r *ceilingRig) give(now, iv int64, slots []int64, cands ...string) ([]string, map[string]int64) {
	r.t.Helper()
	var ks []string
	idx := map[string]int{}
	var ci []int
	for _, c := range cands {
		i, ok := idx[c]
		if !ok {
			i = len(ks)
			idx[c] = i
			ks = append(ks, r.space.KeyCeiling("api", c))
		}
		ci = append(ci, i)
	}
	rep, err := r.st.KeyCeiling(context.Background(), ks, lua.KeyCeilingArgs{Interval: iv, MarginMs: 1000, Now: now, Slots: slots, Candidates: ci})
	if err != nil {
		r.t.Fatal(err)
	}
	got := make([]string, len(slots))
	for j, g := range rep.Given {
		if g >= 0 {
			got[j] = cands[g]
		}
	}
	tats := map[string]int64{}
	for c, i := range idx {
		tats[c] = rep.TAT[i]
	}
	return got, tats
}

func (r *ceilingRig) pttl(key string) time.Duration {
	r.t.Helper()
	d, err := redistest.Client(r.t).PTTL(context.Background(), r.space.KeyCeiling("api", key)).Result()
	if err != nil {
		r.t.Fatal(err)
	}
	return d
}

// Each slot goes to the first candidate whose key's tat has come; a key
// whose tat is ahead of a slot is passed over, a slot nobody may take is
// given to none, a key's second candidate takes a later slot once the
// interval has passed; the tats and their TTLs (tat − now + margin) follow.
func TestKeyCeilingGivesSlotsInOrder(t *testing.T) {
	r := newCeilingRig(t)
	now := time.Now().UnixMicro()
	const iv = 500_000 // 2/s
	steps := []struct {
		slots []int64 // after now, µs
		cands []string
		want  []string
	}{
		// A, B, A again: A's second candidate must wait 500ms
		{[]int64{0, 100, 200}, []string{"A", "B", "A"}, []string{"A", "B", ""}},
		// A's tat is now+500ms: B and C first (B's tat is +600ms), then A
		{[]int64{300, 400, 500, 600}, []string{"A", "B", "C", "A"}, []string{"C", "", "A", "B"}},
		// none may take a slot before its key's tat; D is new
		{[]int64{700, 750}, []string{"A", "B", "C", "D"}, []string{"D", ""}},
	}
	for i, s := range steps {
		slots := make([]int64, len(s.slots))
		for j, ms := range s.slots {
			slots[j] = now + ms*1000
		}
		got, _ := r.give(now, iv, slots, s.cands...)
		if fmt.Sprint(got) != fmt.Sprint(s.want) {
			t.Errorf("step %d: got %q, want %q", i, got, s.want)
		}
	}
	_, tats := r.give(now, iv, nil, "A", "B", "C", "D", "E")
	want := map[string]int64{"A": now + 1_000_000, "B": now + 1_100_000, "C": now + 800_000, "D": now + 1_200_000, "E": 0}
	for k, w := range want {
		if tats[k] != w {
			t.Errorf("tat of %s: got %d, want %d (now %+d)", k, tats[k], w, w-now)
		}
	}
	// TTL: tat − now + 1s, with now the call's (explicit) now, not the
	// real clock: D's tat is 1.2s after now
	if d := r.pttl("D"); d < 1500*time.Millisecond || d > 2200*time.Millisecond {
		t.Errorf("PTTL of D's tat %v, want about 2.2s (its tat 1.2s ahead plus the 1s margin)", d)
	}
	if d := r.pttl("E"); d != -2*time.Nanosecond && d != -2*time.Millisecond {
		t.Errorf("PTTL of E (never given a slot) %v, want none (no key)", d)
	}
	// with Redis TIME, a tat in the past gets just the margin
	if _, err := r.st.KeyCeiling(context.Background(), []string{r.space.KeyCeiling("api", "F")},
		lua.KeyCeilingArgs{Interval: 1, MarginMs: 1000, Slots: []int64{now - 10_000_000}, Candidates: []int{0}}); err != nil {
		t.Fatal(err)
	}
	if d := r.pttl("F"); d <= 0 || d > time.Second {
		t.Errorf("PTTL of F %v, want at most the 1s margin", d)
	}
}

// The tat keys share their downstream bucket's slot (one script call per
// downstream on a cluster).
func TestKeyCeilingKeySharesBucketSlot(t *testing.T) {
	s := keys.New("p")
	for _, k := range []string{"acme", "}{", "{x}", ""} {
		if a, b := redistest.Slot(s.KeyCeiling("api", k)), redistest.Slot(s.Bucket("api")); a != b {
			t.Errorf("key ceiling of %q in slot %d, bucket in %d", k, a, b)
		}
	}
}

// Several callers (processes) hand out slots of one bucket to the same
// keys at once: each key's slots are at least the interval apart, and no
// slot goes to two candidates.
func TestKeyCeilingSeveralCallers(t *testing.T) {
	r := newCeilingRig(t)
	now := time.Now().UnixMicro()
	const iv, callers, rounds, perRound = 100_000, 3, 40, 8 // 10/s per key; slots 1ms apart
	var mu sync.Mutex
	var next int64 = now
	taken := map[string][]int64{}
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				mu.Lock()
				slots := make([]int64, perRound)
				for j := range slots {
					slots[j] = next
					next += 1000
				}
				mu.Unlock()
				cands := []string{"A", "B", "C", "A", "B", "C", fmt.Sprint("own", c)}
				got, _ := r.give(now, iv, slots, cands...)
				mu.Lock()
				for j, k := range got {
					if k != "" {
						taken[k] = append(taken[k], slots[j])
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	span := next - now
	for _, k := range []string{"A", "B", "C"} {
		ts := taken[k]
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
		for i := 1; i < len(ts); i++ {
			if d := ts[i] - ts[i-1]; d < iv {
				t.Errorf("%s: slots %d µs apart, want at least %d", k, d, iv)
			}
		}
		// the slots span 960ms: 10 at 10/s, give or take the first
		if want := int(span/iv) + 1; len(ts) < want-1 || len(ts) > want {
			t.Errorf("%s took %d slots over %dms, want %d or %d", k, len(ts), span/1000, want-1, want)
		}
	}
}
