package lua_test

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/redistest"
)

// quotaRun reserves on one bucket with quotas, on a simulated clock that
// never falls behind the real one (Redis expires keys in real time).
type quotaRun struct {
	t      *testing.T
	st     *lua.Store
	bucket string
	ans    lua.AnswerKeys
	claims string
	quotas []lua.QuotaArgs
	guard  int64
	now    int64
	prefix string
	slots  [][2]int64 // reserved slot, cost
}

func newQuotaRun(t *testing.T, quotas ...lua.QuotaArgs) *quotaRun {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	sp := keys.New(prefix)
	for i := range quotas {
		quotas[i].Key = sp.Quota("api", fmt.Sprintf("q%d", i))
	}
	return &quotaRun{t: t, st: lua.New(rdb), bucket: sp.Bucket("api"),
		ans: lua.AnswerKeys{Announced: sp.Announced("api"), Issued: sp.Issued("api")}, claims: sp.PriorityClaims("api"), quotas: quotas,
		now: time.Now().UnixMicro(), prefix: prefix}
}

func (r *quotaRun) advance(dt int64) {
	r.now = max(r.now+dt, time.Now().UnixMicro())
}

func (r *quotaRun) reserve(interval, cost, n, maxWait int64) lua.BucketReply {
	r.t.Helper()
	rep, err := r.st.Reserve(context.Background(), r.bucket, lua.BucketArgs{Interval: interval, MaxWait: maxWait,
		Now: r.now, Slots: n, Answers: r.ans, Claims: r.claims, Cost: cost, Guard: r.guard, Quotas: r.quotas})
	if err != nil {
		r.t.Fatalf("reserve: %v", err)
	}
	for j := range rep.Reserved {
		r.slots = append(r.slots, [2]int64{max(rep.Base+j*rep.Interval, rep.Now), cost})
	}
	return rep
}

// Random reservations never put more than a sliding quota's limit in any
// window of its period plus the guard, and a reply that found no room says
// when there is: a reservation at that time gets its slot.
func TestQuotaSlidingNeverExceeded(t *testing.T) {
	t.Parallel()
	r := newQuotaRun(t,
		lua.QuotaArgs{Limit: 7, Period: 100_000, Sub: 10_000, Align: -1},
		lua.QuotaArgs{Limit: 20, Period: 1_000_000, Sub: 100_000, Align: -1})
	r.guard = 15_000 // longer than a sub-window, so it is what keeps the bound
	rng := rand.New(rand.NewSource(1))
	held, heldRoom := 0, 0
	for step := range 600 {
		cost := int64(1 + rng.Intn(3))
		n := int64(1 + rng.Intn(6))
		rep := r.reserve(2_000*cost, cost, n, 20_000)
		if rep.Reserved == 0 && rep.HeldBy > 0 {
			held++
			// at the wait less max wait, the first slot is within reach
			r.advance(rep.Wait - 20_000)
			if again := r.reserve(2_000*cost, cost, 1, 20_000); again.Reserved == 1 {
				heldRoom++
			} else {
				t.Fatalf("step %d: the reply said room in %dµs; at that time none: %+v", step, rep.Wait, again)
			}
		}
		r.advance(int64(rng.Intn(15_000)))
	}
	for qi, q := range r.quotas {
		for i, s := range r.slots {
			sum := int64(0)
			for _, o := range r.slots {
				if o[0] <= s[0] && o[0] > s[0]-q.Period-r.guard {
					sum += o[1]
				}
			}
			if sum > q.Limit {
				t.Fatalf("quota %d (%d per %dµs): %d units in the %dµs up to slot %d (#%d)", qi, q.Limit, q.Period, sum, q.Period+r.guard, s[0], i)
			}
		}
	}
	if held == 0 || len(r.slots) < 100 {
		t.Fatalf("a weak sequence: %d slots, %d holds", len(r.slots), held)
	}
	checkTTLs(t, redistest.Client(t), r.prefix, 0, "end")
	t.Logf("%d slots, %d quota holds, each followed by a slot at the time the reply named (%d)", len(r.slots), held, heldRoom)
}

// Aligned windows: at most the limit per window, no slot within the guard
// of a window's end, and the reset is the window's end.
func TestQuotaAlignedWindows(t *testing.T) {
	t.Parallel()
	const per, align, limit = 200_000, 70_000, 9
	r := newQuotaRun(t, lua.QuotaArgs{Limit: limit, Period: per, Sub: per, Align: align})
	r.guard = 5_000
	rng := rand.New(rand.NewSource(2))
	for step := range 300 {
		rep := r.reserve(3_000, 1, int64(1+rng.Intn(5)), 40_000)
		w := (rep.Now - align) / per
		if want := (w+1)*per + align; rep.Quotas[0].Reset != want {
			t.Fatalf("step %d: reset %d, want the window's end %d", step, rep.Quotas[0].Reset, want)
		}
		r.advance(int64(rng.Intn(20_000)))
	}
	per0 := map[int64]int64{}
	for _, s := range r.slots {
		w := (s[0] - align) / per
		per0[w] += s[1]
		if end := (w+1)*per + align; s[0]+r.guard >= end {
			t.Fatalf("slot %d lies within the guard %dµs of its window's end %d", s[0], r.guard, end)
		}
	}
	full := 0
	for w, n := range per0 {
		if n > limit {
			t.Fatalf("window %d holds %d units, limit %d", w, n, limit)
		}
		if n == limit {
			full++
		}
	}
	if full < 5 {
		t.Fatalf("only %d of %d windows filled: the quota should bind", full, len(per0))
	}
}

func (r *quotaRun) settle(a lua.SettleArgs) lua.SettleReply {
	r.t.Helper()
	a.Answers, a.Now, a.Guard, a.Quotas = r.ans, r.now, r.guard, r.quotas
	rep, err := r.st.Settle(context.Background(), r.bucket, a)
	if err != nil {
		r.t.Fatalf("settle: %v", err)
	}
	return rep
}

// An announcement leaves what the downstream said, less the units
// reserved after the task that carried it; reservations spend it at a
// pace that lasts until its reset, then hold until the reset.
func TestAnnouncedLimit(t *testing.T) {
	t.Parallel()
	r := newQuotaRun(t)
	first := r.reserve(1_000, 1, 10, 100_000) // ten slots issued
	if first.Reserved != 10 || first.Issued != 0 {
		t.Fatalf("first reservation: %+v, want 10 slots from issued 0", first)
	}
	until := r.now + 1_000_000
	// the answer to the second task: 12 left then, 8 reserved after it
	rep := r.settle(lua.SettleArgs{Unit: 1_000, Slot: r.now, Seq: 2,
		Announce: &lua.Announcement{Remaining: 12, Until: until, Limit: 20, Source: "x-ratelimit"}})
	if !rep.Stored || rep.Left != 4 {
		t.Fatalf("announce: %+v, want stored with 4 left (12 - 8 reserved after the task)", rep)
	}
	// an older task's answer does not replace it
	if old := r.settle(lua.SettleArgs{Unit: 1_000, Slot: r.now, Seq: 1,
		Announce: &lua.Announcement{Remaining: 13, Until: until, Source: "x-ratelimit"}}); old.Stored || old.Left != 4 {
		t.Fatalf("an older answer: %+v, want not stored, 4 left", old)
	}
	r.advance(10_000)
	got := r.reserve(1_000, 1, 10, 2_000_000)
	// the pace: what is left lasts until the reset
	if got.Reserved != 4 || got.HeldBy != -2 || got.Interval < (until-r.now)/4 {
		t.Fatalf("reserve under the announcement: %+v, want 4 slots at least %dµs apart", got, (until-r.now)/4)
	}
	// then nothing until the reset
	hold := r.reserve(1_000, 1, 1, 100_000)
	// (the pace rounds up: next_free may lie a few µs past the reset)
	if hold.Reserved != 0 || hold.Wait < until-r.now || hold.Wait > until-r.now+4 {
		t.Fatalf("reserve with the announcement spent: %+v, want a hold until its reset (%dµs)", hold, until-r.now)
	}
	// after the reset: back to the bucket's own interval
	r.now = max(until, r.now)
	r.advance(0)
	after := r.reserve(1_000, 1, 3, 10_000_000)
	if after.Reserved != 3 || after.Interval != 1_000 || after.HeldBy != 0 {
		t.Fatalf("after the reset: %+v, want 3 slots at 1000µs", after)
	}
	// a stricter hold from an older task still wins
	r.settle(lua.SettleArgs{Unit: 1_000, Slot: r.now, Seq: after.Issued + 3,
		Announce: &lua.Announcement{Remaining: 50, Until: r.now + 500_000, Source: "x-ratelimit"}})
	if h := r.settle(lua.SettleArgs{Unit: 1_000, Slot: r.now, Seq: after.Issued + 1,
		Announce: &lua.Announcement{Remaining: 0, Until: r.now + 900_000, Source: "retry-after"}}); !h.Stored || h.Left != 0 {
		t.Fatalf("a hold from an older task: %+v, want stored with 0 left", h)
	}
}

// Settling a cost moves next_free by the difference: a charge at most 24h
// past now, a refund never before now; the task's quota field follows.
func TestSettleCost(t *testing.T) {
	t.Parallel()
	r := newQuotaRun(t, lua.QuotaArgs{Limit: 100, Period: 10_000_000, Sub: 1_000_000, Align: -1})
	// 100ms into the next 1s sub-window, so that the slots below share
	// one: the full suite once saw the second reservation cross into the
	// next, and the refund then left its unit counted (2 used, not 1)
	r.now = (r.now/1_000_000+1)*1_000_000 + 100_000
	res := r.reserve(10_000, 1, 1, -1)
	slot := res.Base
	if c := r.settle(lua.SettleArgs{Diff: 2, Unit: 10_000, Slot: slot, Seq: 1}); c.NextFree != res.NextFree+20_000 {
		t.Fatalf("charge 2 units: next_free %d, want %d", c.NextFree, res.NextFree+20_000)
	}
	if q := r.reserve(10_000, 1, 1, -1); q.Quotas[0].Used != 4 {
		t.Fatalf("quota after a charge of 2 and one more unit: %d used, want 4", q.Quotas[0].Used)
	}
	r.advance(0)
	if c := r.settle(lua.SettleArgs{Diff: -1_000, Unit: 10_000, Slot: slot, Seq: 1}); c.NextFree != c.Now {
		t.Fatalf("a refund bigger than the backlog: next_free %d, want now %d", c.NextFree, c.Now)
	}
	if q := r.reserve(10_000, 1, 1, -1); q.Quotas[0].Used != 1 {
		t.Fatalf("quota after a refund below 0 and one unit: %d used, want 1 (the refunded field is gone)", q.Quotas[0].Used)
	}
	// a refund stops at the end of the call's actual cost
	nf := r.reserve(50_000, 5, 1, -1).NextFree
	if c := r.settle(lua.SettleArgs{Diff: -4, Unit: 10_000, Slot: nf - 50_000, Seq: 1, Floor: nf - 35_000}); c.NextFree != nf-35_000 {
		t.Fatalf("a refund of 4 of 5 units: next_free %d, want the floor %d", c.NextFree, nf-35_000)
	}
	if c := r.settle(lua.SettleArgs{Diff: 1 << 40, Unit: 10_000, Slot: r.now, Seq: 1}); c.NextFree != c.Now+86_400_000_000 {
		t.Fatalf("a huge charge: next_free %d, want now + 24h", c.NextFree)
	}
}
