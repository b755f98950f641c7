package lua_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/refmodel"
	"github.com/shaper-io/shaper/limiters"
)

// variant is one admission script as the differential tests drive it: an
// algorithm and, for the sliding counter, a number of sub-windows (0: the
// two-window counter).
type variant struct {
	alg limiters.Algorithm
	sub int
}

func (v variant) String() string {
	if v.sub > 0 {
		return fmt.Sprintf("%s_%d_sub-windows", v.alg, v.sub)
	}
	return string(v.alg)
}

// fits reports whether l's window has room for v's sub-windows (1µs each).
func (v variant) fits(l limiters.Limit) bool {
	return limiters.CheckSubWindows(v.alg, l, v.sub) == nil
}

// variants lists every algorithm, then the sliding counter with 2, 10 and
// 60 sub-windows. The first five keep their indexes (and so the seeds).
func variants() []variant {
	var vs []variant
	for _, a := range limiters.Algorithms() {
		vs = append(vs, variant{alg: a})
	}
	for _, n := range []int{2, 10, 60} {
		vs = append(vs, variant{alg: limiters.SlidingCounter, sub: n})
	}
	return vs
}

// maxBack is the longest clock step back decodeOps makes (µs).
const maxBack = 15 * 300

// nextEdge is the first µs after t that starts a window or, with
// sub-windows, a sub-window (their edges fall between microseconds when
// the window is not a multiple of N: sub-window k starts at ceil(k*W/N)).
func (a admission) nextEdge(t int64) int64 {
	w := a.period
	if a.sub == 0 {
		return (t/w + 1) * w
	}
	q := t / w
	i := (t - q*w) * a.sub / w
	return q*w + ((i+1)*w+a.sub-1)/a.sub
}

// checkRetry asserts, after a rejection at now, that the same request is
// still rejected 1µs before now+retry and allowed at now+retry (peeks,
// which write nothing), by script and model alike: the Retry-After is the
// moment enough of the window has slid out, not an estimate.
func (r *admissionRun) checkRetry(in string, now int64, key string, cost, retry int64) {
	r.tb.Helper()
	peek := func(at int64) int64 {
		args := lua.AdmissionArgs{Limit: r.a.a1, Window: r.a.a2, Cost: cost * r.a.p, Now: at, SubWindows: r.a.sub}
		got, _, err := admit(r.ctx, r.store, lua.SlidingSubwindows, key, args, refmodel.Peek, 0)
		if err != nil {
			r.fail("%s: peek at now+%dµs: %v", in, at-now, err)
		}
		want := r.model.Do(at, key, r.a.a1, r.a.a2, cost*r.a.p, refmodel.Peek, 0)
		if got != want {
			r.fail("%s: peek at now+%dµs:\n  script %v\n  model  %v", in, at-now, got, want)
		}
		return got[0]
	}
	if retry > 1 && peek(now+retry-1) != 0 {
		r.fail("%s: retry_after %dµs, but the request is allowed 1µs earlier", in, retry)
	}
	if peek(now+retry) != 1 {
		r.fail("%s: retry_after %dµs, but the request is still rejected then", in, retry)
	}
}

// subStep is one call of sliding_subwindows.lua at t0+at.
type subStep struct {
	at    time.Duration
	cost  int64
	mode  int
	token int // refund: index of the step whose charge is given back
	want  [4]int64
	// fields is HLEN after the call; pttl is the key's PTTL after the
	// call, within 2ms (0: not checked).
	fields int64
	pttl   time.Duration
}

// The script on its own, at explicit times: 10 per second in 10
// sub-windows of 100ms. Each row says why its numbers are what they are.
func TestSubWindowsScriptSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	key := redistest.Prefix(t) + ":{swc10:test:k}"
	t0 := time.Now().Truncate(time.Second).Add(time.Second).UnixMicro() // a window edge
	const ms = time.Millisecond
	steps := []subStep{
		// sub-window 0: reset = until sub-window 0 has slid out (1.1s) - 50ms
		{at: 50 * ms, cost: 4, want: [4]int64{1, 6, 0, 1_050_000}, fields: 1, pttl: 1050*ms + margin},
		{at: 150 * ms, cost: 6, want: [4]int64{1, 0, 0, 1_050_000}, fields: 2, pttl: 1050*ms + margin},
		// full. In sub-window 10 the 4 of sub-window 0 weigh 4*(1-e): 4*(1-e)+6+1 <= 10
		// at e = 1/4, 1.025s; nothing is written (fields and TTL as before)
		{at: 200 * ms, cost: 1, want: [4]int64{0, 0, 825_000, 1_000_000}, fields: 2, pttl: 1050*ms + margin},
		{at: 1_024_999 * time.Microsecond, cost: 1, mode: refmodel.Peek, want: [4]int64{0, 0, 1, 175_001}, fields: 2},
		{at: 1025 * ms, cost: 1, mode: refmodel.Peek, want: [4]int64{1, 0, 0, 175_000}, fields: 2},
		{at: 1025 * ms, cost: 1, want: [4]int64{1, 0, 0, 1_075_000}, fields: 3, pttl: 1075*ms + margin},
		// sub-window 11 at e = 1/2: sub-window 0 is out (its field deleted),
		// sub-window 1 weighs 6*0.5, plus the 1 of sub-window 10: 4+6 <= 10
		{at: 1150 * ms, cost: 6, want: [4]int64{1, 0, 0, 1_050_000}, fields: 3, pttl: 1050*ms + margin},
		// giving back the 6 empties sub-window 11's field: it is deleted
		{at: 1160 * ms, cost: 6, mode: refmodel.Refund, token: 6, want: [4]int64{1, 0, 0, 0}, fields: 2},
		// at e = 0.6: 6*0.4 + 1 = 3.4 counted, 6.6 left
		{at: 1160 * ms, cost: 0, mode: refmodel.Peek, want: [4]int64{1, 6, 0, 940_000}, fields: 2},
		// long idle: every field has slid out; a charge deletes them all
		{at: 5 * time.Second, cost: 1, mode: refmodel.Peek, want: [4]int64{1, 9, 0, 0}, fields: 2},
		{at: 5 * time.Second, cost: 1, want: [4]int64{1, 9, 0, 1_100_000}, fields: 1, pttl: 1100*ms + margin},
	}
	tokens := make([]int64, len(steps))
	for i, s := range steps {
		now := t0 + int64(s.at/time.Microsecond)
		var token int64
		if s.mode == refmodel.Refund {
			token = tokens[s.token]
		}
		before := rdb.HGetAll(ctx, key).Val()
		got, _, err := admit(ctx, lua.New(rdb), lua.SlidingSubwindows, key,
			lua.AdmissionArgs{Limit: 10, Window: 1_000_000, Cost: s.cost, Now: now, SubWindows: 10}, s.mode, token)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if after := rdb.HGetAll(ctx, key).Val(); (got[0] == 0 || s.mode == refmodel.Peek) && !maps.Equal(before, after) {
			t.Errorf("step %d: a rejection or a peek wrote: %v became %v", i, before, after)
		}
		tokens[i] = got[4]
		if [4]int64(got[:4]) != s.want {
			t.Errorf("step %d (at %v cost %d mode %d): got %v, want %v", i, s.at, s.cost, s.mode, got[:4], s.want)
		}
		if wantSub := (now - t0) / 100_000; s.mode != refmodel.Refund && got[4]-tokens[0] != wantSub {
			t.Errorf("step %d: sub-window %d, want %d after the first", i, got[4]-tokens[0], wantSub)
		}
		if n := rdb.HLen(ctx, key).Val(); n != s.fields {
			t.Errorf("step %d: HLEN %d, want %d (%v)", i, n, s.fields, rdb.HGetAll(ctx, key).Val())
		}
		// The TTL counts down in real time from the last write; allow for
		// the time since (the steps run within milliseconds).
		if s.pttl > 0 {
			if ttl := rdb.PTTL(ctx, key).Val(); ttl > s.pttl || ttl < s.pttl-50*ms {
				t.Errorf("step %d: PTTL %v, want %v (the newest field's last use plus the margin)", i, ttl, s.pttl)
			}
		}
	}
	if typ := rdb.Type(ctx, key).Val(); typ != "hash" {
		t.Errorf("TYPE %s, want hash", typ)
	}
}

// A clock stepped back (a failover to a replica whose clock is behind) can
// leave a field ahead of now. It is not counted yet, but Retry-After must
// count it from the moment its sub-window comes, or the retry is refused.
func TestSubWindowsClockStepBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	key := redistest.Prefix(t) + ":{swc10:test:k}"
	t0 := time.Now().Truncate(time.Second).Add(time.Second).UnixMicro()
	call := func(atMS float64, cost int64, mode int) refmodel.Reply {
		t.Helper()
		now := t0 + int64(atMS*1000)
		v, _, err := admit(ctx, lua.New(rdb), lua.SlidingSubwindows, key,
			lua.AdmissionArgs{Limit: 10, Window: 1_000_000, Cost: cost, Now: now, SubWindows: 10}, mode, 0)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, s := range []struct {
		atMS float64
		cost int64
	}{{150, 5}, {950, 5}, {1150, 2}} { // sub-windows 1, 9 and 11
		if v := call(s.atMS, s.cost, refmodel.Charge); v[0] != 1 {
			t.Fatalf("charge %d at %vms: %v, want allowed", s.cost, s.atMS, v)
		}
	}
	// Back to 1050ms (sub-window 10): 5+5 counted, 1 more does not fit.
	// In sub-window 11 the 5 of sub-window 1 weigh 5*(1-e); without the 2
	// of sub-window 11 the request would fit at e = 0.2 (1.12s), with them
	// only at e = 0.6, 1.16s.
	v := call(1050, 1, refmodel.Charge)
	if v[0] != 0 || v[2] != 110_000 {
		t.Fatalf("cost 1 at 1050ms: %v, want rejected with retry_after 110000µs", v)
	}
	if p := call(1159.999, 1, refmodel.Peek); p[0] != 0 {
		t.Errorf("peek 1µs before the Retry-After: %v, want rejected", p)
	}
	if p := call(1160, 1, refmodel.Peek); p[0] != 1 {
		t.Errorf("peek at the Retry-After: %v, want allowed", p)
	}
}
