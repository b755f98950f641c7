package lua_test

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/refmodel"
	"github.com/shaper-io/shaper/limiters"
)

// The differential tests below run the same random sequence of calls through
// a script on a real redis-server and through its pure-Go reference model,
// and demand identical replies, field by field. Time is explicit (ARGV[5]),
// and the simulated clock keeps up with the real one (see clock), so a key
// that Redis expires (in real time) has always run out of state in simulated
// time too, and real expiry cannot make the two diverge.

// margin is the scripts' MARGIN_MS: every TTL is the state's lifetime plus it.
const margin = time.Second

// ttlOf is the TTL a script sets on state that lives us microseconds.
func ttlOf(us int64) time.Duration {
	return time.Duration((us+999)/1000)*time.Millisecond + margin
}

// shape is a limit the differential tests run each script against.
type shape struct {
	name  string
	limit limiters.Limit
	// fast: the limit renews within microseconds, so a sequence may well
	// have no rejection at all.
	fast bool
}

var shapes = []shape{
	{name: "3/s_burst_1", limit: limiters.Limit{Rate: 3, Period: time.Second, Burst: 1}},
	{name: "10/s_burst_5", limit: limiters.Limit{Rate: 10, Period: time.Second, Burst: 5}},
	{name: "7/1500ms", limit: limiters.Limit{Rate: 7, Period: 1500 * time.Millisecond}},
	{name: "1/10ms", limit: limiters.Limit{Rate: 1, Period: 10 * time.Millisecond}},
	{name: "50/20ms_burst_20", limit: limiters.Limit{Rate: 50, Period: 20 * time.Millisecond, Burst: 20}},
	// A valid if extreme limit: the window number has 15 digits.
	{name: "3/10us", limit: limiters.Limit{Rate: 3, Period: 10 * time.Microsecond}, fast: true},
}

// admit runs one admission call in mode (refmodel.Charge, Peek or Refund)
// through the Store, and returns its reply as the model's five fields, with
// the whole typed reply beside it.
func admit(ctx context.Context, st *lua.Store, alg lua.Admission, key string, a lua.AdmissionArgs, mode int, token int64) (refmodel.Reply, lua.AdmissionReply, error) {
	var r lua.AdmissionReply
	var err error
	switch mode {
	case refmodel.Peek:
		r, err = st.PeekAdmission(ctx, alg, key, a)
	case refmodel.Refund:
		r, err = st.RefundAdmission(ctx, alg, key, a, token)
	default:
		r, err = st.Admit(ctx, alg, key, a)
	}
	allowed := int64(0)
	if r.Allowed {
		allowed = 1
	}
	return refmodel.Reply{allowed, r.Remaining, r.RetryAfter, r.ResetAfter, r.Token}, r, err
}

// bucket runs one shaping.lua call in mode (refmodel.Charge: reserve, Peek,
// Refund: push back) through the Store, and returns its five fields.
func bucket(ctx context.Context, st *lua.Store, key string, a lua.BucketArgs, mode int) ([5]int64, error) {
	var r lua.BucketReply
	var err error
	switch mode {
	case refmodel.Peek:
		r, err = st.PeekBucket(ctx, key, a)
	case refmodel.Refund:
		r, err = st.PushBack(ctx, key, a)
	default:
		r, err = st.Reserve(ctx, key, a)
	}
	return [5]int64{r.Reserved, r.Wait, r.NextFree, r.Now, r.Base}, err
}

func scriptOf(alg limiters.Algorithm) lua.Admission {
	switch alg {
	case limiters.FixedWindow:
		return lua.FixedWindow
	case limiters.SlidingLog:
		return lua.SlidingLog
	case limiters.SlidingCounter:
		return lua.SlidingCounter
	case limiters.TokenBucket:
		return lua.TokenBucket
	case limiters.LeakyBucket:
		return lua.LeakyBucket
	}
	panic("unknown algorithm " + alg)
}

func windowed(alg limiters.Algorithm) bool {
	return alg == limiters.FixedWindow || alg == limiters.SlidingLog || alg == limiters.SlidingCounter
}

// admission is one algorithm under one limit, with the script arguments
// derived exactly as limiters.New derives them.
type admission struct {
	alg      limiters.Algorithm
	limit    limiters.Limit
	a1, a2   int64 // ARGV[1], ARGV[2]
	p        int64 // scale of a cost: ARGV[3] = cost*p
	capacity int64 // largest cost the client lets through
	period   int64 // µs, for time steps that land on window edges
	sub      int64 // the sliding counter's sub-windows (0: two windows)
	maxTTL   time.Duration
}

func newAdmission(tb testing.TB, v variant, l limiters.Limit) admission {
	tb.Helper()
	alg := v.alg
	if windowed(alg) {
		l.Burst = 0 // the windows count Rate per Period; Burst must be 0 or Rate
	}
	// limiters.New validates the limit as production does; it does not
	// touch Redis, so no client is needed.
	if _, err := limiters.New(nil, limiters.Config{Name: "diff", Algorithm: alg, Limit: l, SubWindows: v.sub}); err != nil {
		tb.Fatalf("%s %v: %v", v, l, err)
	}
	a := admission{alg: alg, limit: l, capacity: l.Capacity(), period: int64(l.Period / time.Microsecond), sub: int64(v.sub)}
	if windowed(alg) {
		a.a1, a.a2, a.p = l.Rate, a.period, 1
		a.maxTTL = ttlOf(2 * a.period) // the sliding counter's previous window lives 2 windows
		if a.sub > 0 {
			// a window and a sub-window, from the newest field (which a
			// clock step back may put ahead of now)
			a.maxTTL = ttlOf(a.period + (a.period+a.sub-1)/a.sub + maxBack)
		}
	} else {
		n, p := l.Scaled()
		a.a1, a.a2, a.p = l.Capacity()*p, n, p
		a.maxTTL = ttlOf((a.a1 + n - 1) / n) // empty to full, or full to empty
	}
	return a
}

// op is one decoded step.
type op struct {
	dt    int64 // µs the simulated clock advances
	edge  bool  // instead, advance to the next multiple of the period, plus off
	off   int64 // µs, -3..3
	back  int64 // µs this call's now lags the clock (a clock step back)
	key   int   // 0..2
	cost  int64 // units, 0..capacity
	mode  int   // refmodel.Charge, ModePeek or ModeRefund
	pick  int   // refund: which open charge to give back; shaping: max wait multiple, push-back length
	extra int64 // shaping: max wait class
}

const opBytes = 6

// decodeOps turns bytes into steps, opBytes per step. Both the random test
// (random bytes) and the fuzz target use it. The time steps average well
// over a millisecond, and the clock never lags real time by more than
// maxLag anyway.
func decodeOps(data []byte, capacity, period int64) []op {
	var ops []op
	for len(data) >= opBytes {
		b := data[:opBytes]
		data = data[opBytes:]
		var o op
		switch b[0] % 8 {
		case 0:
			o.dt = 0
		case 1, 2, 3:
			o.dt = int64(b[1]) * 8 // 0..2ms
		case 4:
			o.dt = int64(b[1]) * period / 256
		case 5:
			o.edge = true
			o.off = int64(b[1]%7) - 3
		case 6:
			o.dt = int64(b[1]) // µs apart
		case 7:
			o.dt = int64(b[1]) * 40 // 0..10ms
		}
		if b[0] >= 240 {
			o.back = int64(b[0]-240) * 300 // up to 4.5ms back
		}
		o.key = int(b[2] % 3)
		switch (b[2] / 3) % 4 {
		case 0, 1:
			o.mode = refmodel.Charge
		case 2:
			o.mode = refmodel.Peek
		case 3:
			o.mode = refmodel.Refund
		}
		if b[3] < 128 {
			o.cost = 1
		} else {
			o.cost = int64(b[3]) % (capacity + 1)
		}
		o.pick = int(b[4])
		o.extra = int64(b[5])
		ops = append(ops, o)
	}
	return ops
}

// maxLag is how far the simulated clock may fall behind the real one over
// any stretch of steps: well inside the scripts' 1s TTL margin, so a key
// Redis expires (in real time) has run out of state in simulated time too.
const maxLag = 250 * time.Millisecond

// clock is the simulated time in µs since the epoch. Between any two steps
// it advances at least as far as real time does, less maxLag.
type clock struct {
	now      int64
	start    int64
	lastReal time.Time
	lag      time.Duration // real time not yet matched by simulated time
}

func newClock() *clock {
	r := time.Now()
	return &clock{now: r.UnixMicro(), start: r.UnixMicro(), lastReal: r}
}

// advance moves the clock for o and returns the step's now (which lags the
// clock by o.back, a clock step back). edge(t) is the first edge after t.
func (c *clock) advance(o op, edge func(t int64) int64) int64 {
	prev := c.now
	if o.edge {
		next := edge(c.now) + o.off
		if next > c.now {
			c.now = next
		}
	} else {
		c.now += o.dt
	}
	rt := time.Now()
	c.lag = max(c.lag+rt.Sub(c.lastReal)-time.Duration(c.now-prev)*time.Microsecond, 0)
	c.lastReal = rt
	if c.lag > maxLag {
		c.now += int64((c.lag - maxLag) / time.Microsecond)
		c.lag = maxLag
	}
	return c.now - o.back
}

type charge struct{ cost, token int64 }

// admissionRun drives one script and its model through a step sequence.
type admissionRun struct {
	tb     testing.TB
	ctx    context.Context
	rdb    redis.UniversalClient
	a      admission
	script lua.Admission
	store  *lua.Store
	model  refmodel.Model
	prefix string
	keys   [3]string
	clock  *clock
	open   [3][]charge
	hist   []string

	allowed, rejected, refunds, peeks int
}

func newAdmissionRun(tb testing.TB, rdb redis.UniversalClient, prefix string, a admission) *admissionRun {
	r := &admissionRun{
		tb: tb, ctx: context.Background(), rdb: rdb, a: a,
		script: scriptOf(a.alg), store: lua.New(rdb), model: refmodel.New(string(a.alg)),
		prefix: prefix, clock: newClock(),
	}
	if a.sub > 0 {
		r.script, r.model = lua.SlidingSubwindows, refmodel.NewSubWindows(a.sub)
	}
	sp := keys.New(prefix)
	for i := range r.keys {
		r.keys[i] = sp.Limiter(string(a.alg), "diff", fmt.Sprint("k", i))
	}
	return r
}

func (r *admissionRun) fail(format string, args ...any) {
	r.tb.Helper()
	r.tb.Fatalf("%s %v: "+format+"\nlast steps:\n%s", append([]any{r.a.alg, r.a.limit}, append(args, strings.Join(r.hist, "\n"))...)...)
}

func (r *admissionRun) step(i int, o op) {
	r.tb.Helper()
	now := r.clock.advance(o, r.a.nextEdge)
	mode, cost, token := o.mode, o.cost, int64(0)
	if mode == refmodel.Refund {
		open := r.open[o.key]
		if len(open) == 0 {
			mode = refmodel.Charge
		} else {
			// Refund a charge Allow made, as limiters.Redis.Refund does:
			// the same cost, the reply's token.
			j := o.pick % len(open)
			cost, token = open[j].cost, open[j].token
			r.open[o.key] = append(open[:j], open[j+1:]...)
		}
	}
	key := r.keys[o.key]
	args := lua.AdmissionArgs{Limit: r.a.a1, Window: r.a.a2, Cost: cost * r.a.p, Now: now, SubWindows: r.a.sub}
	// The Store checks the reply's length (6 fields for the fixed window,
	// its counter's PTTL last; 5 for the others): a wrong one is an error.
	got, rep, err := admit(r.ctx, r.store, r.script, key, args, mode, token)
	if err != nil {
		r.fail("step %d: script: %v", i, err)
	}
	want := r.model.Do(now, key, r.a.a1, r.a.a2, cost*r.a.p, mode, token)
	in := fmt.Sprintf("step %d: now=%d (t+%dµs) key=k%d mode=%d token=%d %+v", i, now, now-r.clock.start, o.key, mode, token, args)
	r.hist = append(r.hist, fmt.Sprintf("  %s -> %v", in, got))
	if len(r.hist) > 12 {
		r.hist = r.hist[1:]
	}
	if got != want {
		r.fail("%s:\n  script %v\n  model  %v", in, got, want)
	}
	if r.a.alg == limiters.FixedWindow {
		// A refund touches the counter of its charge's window, which may be
		// in its last millisecond of real time (the test's clock is
		// explicit, Redis's TTLs are not): PTTL then reads 0. -1 (no TTL)
		// is always wrong.
		if pttl := rep.CounterPTTL; pttl != -2 && (pttl < 0 || pttl == 0 && mode != refmodel.Refund) {
			r.fail("%s: reply's pttl_ms = %d, want -2 or positive (or 0 on a refund)", in, pttl)
		}
		if mode == refmodel.Charge && got[0] == 1 && cost > 0 && rep.CounterPTTL <= 0 {
			r.fail("%s: a charged counter reports pttl_ms %d", in, rep.CounterPTTL)
		}
	}
	if mode == refmodel.Charge && got[0] == 1 && cost > 0 {
		// The key just charged must outlive its state (reset_after: the
		// window's end, the log's newest entry leaving, the bucket full
		// or empty) by the scripts' margin; allow half of the margin for
		// the real time between the script and this PTTL.
		k := key
		if r.a.alg == limiters.FixedWindow || r.a.alg == limiters.SlidingCounter && r.a.sub == 0 {
			k = fmt.Sprint(key, ":", got[4])
		}
		ms, err := r.rdb.Do(r.ctx, "PTTL", k).Int64()
		if err != nil {
			r.fail("%s: PTTL %s: %v", in, k, err)
		}
		if need := time.Duration(got[3])*time.Microsecond + margin/2; time.Duration(ms)*time.Millisecond < need {
			r.fail("%s: charged key %s has PTTL %dms, want at least %v (reset_after plus most of the margin)", in, k, ms, need)
		}
	}
	if r.a.sub > 0 && mode == refmodel.Charge && got[0] == 0 {
		r.checkRetry(in, now, key, cost, got[2])
	}
	switch {
	case mode == refmodel.Refund:
		r.refunds++
	case mode == refmodel.Peek:
		r.peeks++
	case got[0] == 1:
		r.allowed++
		if cost > 0 {
			r.open[o.key] = append(r.open[o.key], charge{cost, got[4]})
		}
	default:
		r.rejected++
	}
	checkTTLs(r.tb, r.rdb, r.prefix, r.a.maxTTL, in)
}

// checkTTLs asserts that every key under prefix has a positive PTTL of at
// most maxTTL (0: no upper bound).
func checkTTLs(tb testing.TB, rdb redis.UniversalClient, prefix string, maxTTL time.Duration, at string) {
	tb.Helper()
	ctx := context.Background()
	var names []string
	var mu sync.Mutex
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			names = append(names, it.Val())
			mu.Unlock()
		}
		return it.Err()
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, scan)
	} else {
		err = scan(ctx, rdb.(*redis.Client))
	}
	if err != nil {
		tb.Fatalf("%s: scan: %v", at, err)
	}
	for _, k := range names {
		// The raw reply: -2 no key, -1 no TTL, else milliseconds left (0
		// when the key is due this millisecond and not yet reclaimed).
		ms, err := rdb.Do(ctx, "PTTL", k).Int64()
		if err != nil {
			tb.Fatalf("%s: PTTL %s: %v", at, k, err)
		}
		if ms == -2 { // expired between SCAN and PTTL
			continue
		}
		if ms < 0 {
			tb.Fatalf("%s: key %q has no TTL (PTTL %d)", at, k, ms)
		}
		if ttl := time.Duration(ms) * time.Millisecond; maxTTL > 0 && ttl > maxTTL {
			tb.Fatalf("%s: key %q has PTTL %v, longer than its state can live (%v)", at, k, ttl, maxTTL)
		}
	}
}

func TestAdmissionMatchesModel(t *testing.T) {
	t.Parallel()
	const steps = 300
	rdb := redistest.Client(t)
	for ai, v := range variants() {
		for si, sh := range shapes {
			t.Run(v.String()+"/"+sh.name, func(t *testing.T) {
				t.Parallel()
				seed := int64(1000*ai + si + 1)
				rng := rand.New(rand.NewSource(seed))
				data := make([]byte, steps*opBytes)
				rng.Read(data)
				if !v.fits(sh.limit) {
					t.Skipf("%v has no room for %d sub-windows of 1µs", sh.limit.Period, v.sub)
				}
				a := newAdmission(t, v, sh.limit)
				r := newAdmissionRun(t, rdb, redistest.Prefix(t), a)
				for i, o := range decodeOps(data, a.capacity, a.period) {
					r.step(i, o)
				}
				// The sequence must have exercised every path it can fail on.
				if r.allowed == 0 || (r.rejected == 0 && !sh.fast) || r.refunds == 0 || r.peeks == 0 {
					t.Errorf("seed %d: a weak sequence: %d allowed, %d rejected, %d refunds, %d peeks",
						seed, r.allowed, r.rejected, r.refunds, r.peeks)
				}
			})
		}
	}
}

// admissionSeeds are FuzzAdmission's seeds.
func admissionSeeds() [][]byte {
	seeds := [][]byte{
		{0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0},
		{2, 1, 5, 255, 0, 200, 3, 0, 5, 0, 9, 0, 3, 0, 255, 1, 0, 9, 0, 0},
		{3, 4, 1, 10, 3, 255, 7, 0, 0, 0, 11, 255, 7, 0, 5, 0, 3, 200, 9, 0, 244, 9, 4, 255, 1, 0},
		{1, 3, 5, 3, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 5, 250, 0, 0, 0, 0, 0, 0, 5, 4, 0, 1, 0, 0},
		{4, 2, 2, 50, 1, 200, 0, 0, 12, 255, 9, 200, 0, 0, 7, 100, 10, 0, 9, 0, 4, 128, 2, 130},
	}
	for v := byte(5); v < 8; v++ { // sub-windows: fill, reject, an edge, a clock step back, refund, peek
		seeds = append(seeds, []byte{v, 1, 0, 0, 0, 137, 0, 0, 1, 50, 0, 137, 0, 0, 1, 50, 0, 0, 0, 0, 5, 3, 0, 137, 0, 0,
			244, 9, 0, 0, 0, 0, 4, 128, 9, 0, 0, 0, 0, 0, 6, 0, 0, 0})
	}
	return seeds
}

// FuzzAdmission decodes the input as a variant (an algorithm, or the
// sliding counter with sub-windows), a limit shape and a step sequence, and checks script against model as TestAdmissionMatchesModel.
func FuzzAdmission(f *testing.F) {
	for _, s := range admissionSeeds() {
		f.Add(s)
	}
	rdb := redistest.Client(f)
	f.Fuzz(func(t *testing.T, data []byte) { admissionInput(t, rdb, data) })
}

// TestAdmissionMutations runs FuzzAdmission's body on 300 mutations of
// its corpus, as `go test -fuzz FuzzAdmission -fuzztime 300x` would, in the
// normal test run (see redistest.Mutations).
func TestAdmissionMutations(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	var seeds [][]any
	for _, s := range admissionSeeds() {
		seeds = append(seeds, []any{s})
	}
	for i, in := range redistest.Mutations(t, "FuzzAdmission", 1, 300, seeds...) {
		data := in[0].([]byte)
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			defer func() {
				if t.Failed() {
					t.Logf("input %q", data)
				}
			}()
			admissionInput(t, rdb, data)
		})
	}
}

// admissionInput is FuzzAdmission's body.
func admissionInput(t *testing.T, rdb redis.UniversalClient, data []byte) {
	if len(data) < 2 {
		return
	}
	vs := variants()
	v := vs[int(data[0])%len(vs)]
	sh := shapes[int(data[1])%len(shapes)]
	data = data[2:]
	if len(data) > 64*opBytes {
		data = data[:64*opBytes]
	}
	if !v.fits(sh.limit) {
		return
	}
	a := newAdmission(t, v, sh.limit)
	r := newAdmissionRun(t, rdb, redistest.Prefix(t), a)
	for i, o := range decodeOps(data, a.capacity, a.period) {
		r.step(i, o)
	}
}

// shapingRun drives shaping.lua and refmodel.Shaping through a step sequence.
type shapingRun struct {
	tb       testing.TB
	rdb      redis.UniversalClient
	limit    limiters.Limit
	burst    int64 // ARGV[2], µs
	unit     int64 // µs one unit occupies
	period   int64
	model    *refmodel.Shaping
	prefix   string
	keys     [3]string
	clock    *clock
	hist     []string
	nf       [3]int64         // next_free per key, as last replied
	maxTTL   [3]time.Duration // the TTL of each key's last write
	reserved int
	refused  int
	waited   int
}

func (r *shapingRun) step(i int, o op) {
	r.tb.Helper()
	now := r.clock.advance(o, func(t int64) int64 { return (t/r.period + 1) * r.period })
	mode := o.mode
	cost := max(o.cost, 1)
	interval := int64(r.limit.Interval(cost) / time.Microsecond)
	var maxWait int64
	switch o.extra % 4 {
	case 0:
		maxWait = -1 // no limit
	case 1:
		maxWait = 0
	default:
		maxWait = int64(o.pick%5) * r.unit
	}
	if mode == refmodel.Refund {
		// push back: a downstream's Retry-After, up to one period
		interval = int64(o.pick) * r.period / 256
	}
	key := r.keys[o.key]
	n := int64(1)
	if o.pick%3 == 0 {
		n = int64(o.pick%7) + 1 // several slots in one call (ReserveN)
	}
	args := lua.BucketArgs{Interval: interval, Burst: r.burst, MaxWait: maxWait, Now: now, Slots: n}
	got, err := bucket(context.Background(), lua.New(r.rdb), key, args, mode)
	in := fmt.Sprintf("step %d: now=%d (t+%dµs) key=k%d mode=%d %+v", i, now, now-r.clock.start, o.key, mode, args)
	fail := func(format string, args ...any) {
		r.tb.Helper()
		r.tb.Fatalf("shaping %v: %s: "+format+"\nlast steps:\n%s", append([]any{r.limit, in}, append(args, strings.Join(r.hist, "\n"))...)...)
	}
	if err != nil {
		fail("script: %v", err)
	}
	r.hist = append(r.hist, fmt.Sprintf("  %s -> %v", in, got))
	if len(r.hist) > 12 {
		r.hist = r.hist[1:]
	}
	want := r.model.Do(now, key, interval, r.burst, maxWait, mode, n)
	if got != want {
		fail("\n  script %v\n  model  %v", got, want)
	}
	if mode == refmodel.Charge {
		if got[0] >= 1 {
			r.reserved++
			if got[1] > 0 {
				r.waited++
			}
		} else {
			r.refused++
		}
	}
	// The key just written lives until next_free (plus the burst
	// allowance) is in the past, plus the margin, and no longer.
	// (PTTL only falls after a write, so the bound of the last write holds.)
	if (mode == refmodel.Charge && got[0] >= 1) || (mode == refmodel.Refund && r.nf[o.key] < now+interval) {
		r.maxTTL[o.key] = ttlOf(got[2] - now + r.burst)
	}
	if mode != refmodel.Peek {
		r.nf[o.key] = got[2]
	}
	ms, err := r.rdb.Do(context.Background(), "PTTL", key).Int64()
	if err != nil {
		fail("PTTL: %v", err)
	}
	if ttl := time.Duration(ms) * time.Millisecond; ttl > r.maxTTL[o.key] {
		fail("PTTL %v, want at most %v (next_free %d)", ttl, r.maxTTL[o.key], got[2])
	}
	// A reservation's state matters until next_free plus the burst
	// allowance is past: the key must outlive that by most of the margin.
	if mode == refmodel.Charge && got[0] >= 1 {
		need := time.Duration(got[2]-now+r.burst)*time.Microsecond + margin/2
		if ttl := time.Duration(ms) * time.Millisecond; ttl < need {
			fail("PTTL %v after a reservation, want at least %v", ttl, need)
		}
	}
	checkTTLs(r.tb, r.rdb, r.prefix, 0, in)
}

func TestShapingMatchesModel(t *testing.T) {
	t.Parallel()
	const steps = 300
	rdb := redistest.Client(t)
	for si, sh := range []shape{
		{name: "10/s", limit: limiters.Limit{Rate: 10, Period: time.Second, Burst: 1}},
		{name: "10/s_burst_5", limit: limiters.Limit{Rate: 10, Period: time.Second, Burst: 5}},
		{name: "7/1500ms_burst_3", limit: limiters.Limit{Rate: 7, Period: 1500 * time.Millisecond, Burst: 3}},
		{name: "1/10ms_burst_2", limit: limiters.Limit{Rate: 1, Period: 10 * time.Millisecond, Burst: 2}},
		{name: "3/7ms_burst_4", limit: limiters.Limit{Rate: 3, Period: 7 * time.Millisecond, Burst: 4}},
		// a burst allowance (2.9s) longer than the TTL margin
		{name: "10/s_burst_30", limit: limiters.Limit{Rate: 10, Period: time.Second, Burst: 30}},
	} {
		t.Run(sh.name, func(t *testing.T) {
			t.Parallel()
			if err := sh.limit.Validate(); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewSource(int64(si + 1)))
			data := make([]byte, steps*opBytes)
			rng.Read(data)
			prefix := redistest.Prefix(t)
			unit := int64(sh.limit.Interval(1) / time.Microsecond)
			r := &shapingRun{
				tb: t, rdb: rdb, limit: sh.limit, unit: unit,
				burst:  (sh.limit.Capacity() - 1) * unit,
				period: int64(sh.limit.Period / time.Microsecond),
				model:  refmodel.NewShaping(), prefix: prefix, clock: newClock(),
			}
			sp := keys.New(prefix)
			for i := range r.keys {
				r.keys[i] = sp.Bucket(fmt.Sprint("d", i))
			}
			for i, o := range decodeOps(data, 3, r.period) {
				r.step(i, o)
			}
			if r.reserved == 0 || r.refused == 0 || r.waited == 0 {
				t.Errorf("a weak sequence: %d reserved (%d with a wait), %d refused", r.reserved, r.waited, r.refused)
			}
		})
	}
}
