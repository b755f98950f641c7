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
	iv    int64 // interval, µs
	hold  int64 // µs
}

func newCeilingRig(t *testing.T, iv, hold time.Duration) *ceilingRig {
	return &ceilingRig{t: t, st: lua.New(redistest.Client(t)), space: keys.New(redistest.Prefix(t)),
		iv: iv.Microseconds(), hold: hold.Microseconds()}
}

// settle is a claim of key to settle at tat (µs; 0: unused).
type settle struct {
	key, claim string
	tat        int64
}

// call settles ss, then has cands (keys, in order) claim, at most want,
// at now (µs; 0: Redis TIME). It returns the keys claimed, every key's
// tat after the call, and the reply.
func (r *ceilingRig) call(now int64, want int, ss []settle, cands ...string) ([]string, map[string]int64, lua.KeyCeilingReply) {
	r.t.Helper()
	rep, err := r.try(now, want, ss, cands...)
	if err != nil {
		r.t.Fatal(err)
	}
	var got []string
	for i, c := range rep.Claimed {
		if c {
			got = append(got, cands[i])
		}
	}
	names := r.names(ss, cands)
	tats := map[string]int64{}
	for i, k := range names {
		tats[k] = rep.TAT[i]
	}
	return got, tats, rep
}

func (r *ceilingRig) names(ss []settle, cands []string) []string {
	var names []string
	seen := map[string]bool{}
	for _, s := range ss {
		if !seen[s.key] {
			seen[s.key] = true
			names = append(names, s.key)
		}
	}
	for _, c := range cands {
		if !seen[c] {
			seen[c] = true
			names = append(names, c)
		}
	}
	return names
}

func (r *ceilingRig) try(now int64, want int, ss []settle, cands ...string) (lua.KeyCeilingReply, error) {
	names := r.names(ss, cands)
	idx := map[string]int{}
	var ks []string
	for i, k := range names {
		idx[k] = i
		ks = append(ks, r.space.KeyCeiling("api", k))
	}
	a := lua.KeyCeilingArgs{Interval: r.iv, Hold: r.hold, MarginMs: 1000, Now: now, Want: want}
	for _, s := range ss {
		a.Settle = append(a.Settle, lua.KeySettle{Key: idx[s.key], Claim: s.claim, TAT: s.tat})
	}
	for _, c := range cands {
		a.Candidates = append(a.Candidates, idx[c])
	}
	return r.st.KeyCeiling(context.Background(), ks, a)
}

func (r *ceilingRig) pttl(key string) time.Duration {
	r.t.Helper()
	d, err := redistest.Client(r.t).PTTL(context.Background(), r.space.KeyCeiling("api", key)).Result()
	if err != nil {
		r.t.Fatal(err)
	}
	return d
}

// A key whose tat has come is claimed once a call, up to want; a claimed
// key is held until settled (at its slot plus the interval, or deleted
// when it got no slot) or until its hold and interval pass; a settlement
// of a claim the key no longer holds changes nothing; tats and TTLs
// follow.
func TestKeyCeilingClaimsAndSettles(t *testing.T) {
	const ms = 1000 // µs
	r := newCeilingRig(t, 500*time.Millisecond, 200*time.Millisecond)
	t0 := time.Now().UnixMicro()
	step := func(i int, got []string, want ...string) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("step %d: claimed %v, want %v", i, got, want)
		}
	}
	got, tats, rep1 := r.call(t0, 10, nil, "A", "B", "A")
	step(1, got, "A", "B")
	if want := fmt.Sprintf("%d:%d", t0+500*ms, t0+700*ms); rep1.Claim != want || rep1.Now != t0 {
		t.Errorf("claim %q at %d, want %q at %d", rep1.Claim, rep1.Now, want, t0)
	}
	if tats["A"] != t0+500*ms {
		t.Errorf("claimed A's tat %d, want its lo %d", tats["A"], t0+500*ms)
	}
	// the claim's TTL: hi − now + margin
	if d := r.pttl("A"); d < 1500*time.Millisecond || d > 1700*time.Millisecond {
		t.Errorf("PTTL of A's claim %v, want about 1.7s (hi 700ms ahead plus the 1s margin)", d)
	}
	// held: nobody claims A or B before their claims are settled
	got, _, _ = r.call(t0+100*ms, 10, nil, "A", "B", "C", "D")
	step(2, got, "C", "D")
	// A's slot started at +10ms (tat +510ms), B got none; want 1 of B, E
	got, tats, _ = r.call(t0+100*ms, 1, []settle{{"A", rep1.Claim, t0 + 510*ms}, {"B", rep1.Claim, 0}}, "A", "B", "E")
	step(3, got, "B")
	if tats["A"] != t0+510*ms {
		t.Errorf("settled A's tat %d, want %d", tats["A"], t0+510*ms)
	}
	if d := r.pttl("A"); d < 1300*time.Millisecond || d > 1410*time.Millisecond {
		t.Errorf("PTTL of A's tat %v, want about 1.41s (410ms ahead plus the 1s margin)", d)
	}
	// a stale settlement (A no longer holds that claim) is ignored; A's
	// tat comes at +510ms; C's and D's claims (from +100ms) hold until +800ms
	got, tats, _ = r.call(t0+509*ms, 10, []settle{{"A", rep1.Claim, t0}}, "A", "C")
	step(4, got)
	if tats["A"] != t0+510*ms {
		t.Errorf("A's tat %d after a stale settlement, want %d", tats["A"], t0+510*ms)
	}
	got, _, _ = r.call(t0+510*ms, 10, nil, "A", "C")
	step(5, got, "A")
	got, _, _ = r.call(t0+800*ms, 10, nil, "C", "D", "E")
	step(6, got, "C", "D", "E")
	// an unclaimed key is never written
	if _, tats, _ = r.call(t0+800*ms, 0, nil, "F"); tats["F"] != 0 || r.pttl("F") >= 0 {
		t.Errorf("F, never claimed: tat %d, PTTL %v; want none", tats["F"], r.pttl("F"))
	}
	// Redis TIME: a settled tat in the past lives just the margin
	_, _, rep := r.call(0, 1, nil, "G")
	r.call(0, 0, []settle{{"G", rep.Claim, rep.Now - 10*ms}})
	if d := r.pttl("G"); d <= 0 || d > time.Second {
		t.Errorf("PTTL of G's past tat %v, want at most the 1s margin", d)
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

// Several callers (processes) claim the same keys at once on Redis TIME,
// each reserving a slot per claim from one shared bucket (1ms apart,
// within the hold) and settling it in its next call: each key's slots
// are at least the interval apart, and over 400ms each key gets nearly
// every turn the ceiling allows.
func TestKeyCeilingSeveralCallers(t *testing.T) {
	const iv, hold = 40 * time.Millisecond, 200 * time.Millisecond
	r := newCeilingRig(t, iv, hold)
	var mu sync.Mutex
	var nextFree int64
	taken := map[string][]int64{}
	start := time.Now()
	var wg sync.WaitGroup
	for c := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var pending []settle
			for time.Since(start) < 400*time.Millisecond {
				cands := []string{"A", "B", "C", fmt.Sprint("own", c)}
				sent := time.Now()
				rep, err := r.try(0, len(cands), pending, cands...)
				if err != nil {
					t.Error(err)
					return
				}
				pending = nil
				for i, ok := range rep.Claimed {
					if !ok {
						continue
					}
					mu.Lock()
					slot := max(time.Now().UnixMicro(), nextFree)
					nextFree = slot + 1000
					mu.Unlock()
					if slot-rep.Now > hold.Microseconds()-time.Since(sent).Microseconds() {
						pending = append(pending, settle{cands[i], rep.Claim, 0})
						continue
					}
					mu.Lock()
					taken[cands[i]] = append(taken[cands[i]], slot)
					mu.Unlock()
					pending = append(pending, settle{cands[i], rep.Claim, slot + iv.Microseconds()})
				}
			}
		}()
	}
	wg.Wait()
	for _, k := range []string{"A", "B", "C"} {
		ts := taken[k]
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
		for i := 1; i < len(ts); i++ {
			if d := ts[i] - ts[i-1]; d < iv.Microseconds() {
				t.Errorf("%s: slots %dµs apart, want at least %d", k, d, iv.Microseconds())
			}
		}
		// 400ms at 25/s: 10 turns, give or take the first and the round
		// trips (a turn is claimed when a caller next asks)
		if len(ts) < 7 || len(ts) > 11 {
			t.Errorf("%s took %d slots in 400ms at one per %v, want 7-11", k, len(ts), iv)
		}
	}
}
