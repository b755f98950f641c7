package limiters_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/clocktest"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
)

// day is a window long enough that a test never straddles a window edge
// (the window algorithms align windows to the epoch; Layered runs on the
// Redis clock, so the tests cannot pick the time).
const day = 24 * time.Hour

func newNamed(t *testing.T, rdb redis.Scripter, prefix, name string, alg limiters.Algorithm, l limiters.Limit) *limiters.Redis {
	t.Helper()
	lim, err := limiters.New(rdb, limiters.Config{Name: name, Algorithm: alg, Limit: l, Prefix: prefix})
	if err != nil {
		t.Fatalf("New %s: %v", name, err)
	}
	return lim
}

// remaining peeks (cost 0, nothing charged) at what lim would admit for key.
func remaining(t *testing.T, lim limiters.Limiter, key string) int64 {
	t.Helper()
	res, err := lim.Peek(context.Background(), key, 0)
	if err != nil {
		t.Fatalf("peek %s: %v", key, err)
	}
	return res.Remaining
}

func TestLayeredRejectionChargesNoOtherLayer(t *testing.T) {
	t.Parallel()
	for _, globalFirst := range []bool{false, true} {
		t.Run(fmt.Sprint("global_first=", globalFirst), func(t *testing.T) {
			t.Parallel()
			rdb := redistest.Client(t)
			prefix := redistest.Prefix(t)
			ctx := context.Background()
			tenant := newNamed(t, rdb, prefix, "tenant", limiters.TokenBucket, limiters.PerHour(5))
			global := newNamed(t, rdb, prefix, "global", limiters.SlidingLog, limiters.PerHour(2))
			layers := []limiters.Layer{{Limiter: tenant}, {Limiter: global, Key: limiters.Global}}
			if globalFirst {
				layers[0], layers[1] = layers[1], layers[0]
			}
			lay, err := limiters.NewLayered(layers...)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 2; i++ {
				res, err := lay.Allow(ctx, "a", 1)
				if err != nil || !res.Allowed {
					t.Fatalf("allow %d: %v, %v; want allowed", i, res, err)
				}
			}
			if got := remaining(t, tenant, "a"); got != 3 {
				t.Fatalf("tenant a: remaining = %d after two admissions, want 3", got)
			}
			if got := remaining(t, global, limiters.GlobalKey); got != 0 {
				t.Fatalf("global: remaining = %d after two admissions, want 0", got)
			}

			// The global layer is full: every tenant is rejected, and no
			// tenant pays for it.
			for _, key := range []string{"a", "a", "b"} {
				res, err := lay.Allow(ctx, key, 1)
				if err != nil {
					t.Fatal(err)
				}
				if res.Allowed || res.Name != "global" || res.RetryAfter <= 0 {
					t.Fatalf("allow %s: %v, want rejected by global with a RetryAfter", key, res)
				}
			}
			if got := remaining(t, tenant, "a"); got != 3 {
				t.Errorf("tenant a: remaining = %d after global rejections, want 3 (unchanged)", got)
			}
			if got := remaining(t, tenant, "b"); got != 5 {
				t.Errorf("tenant b: remaining = %d after a global rejection, want 5 (untouched)", got)
			}
			if got := remaining(t, global, limiters.GlobalKey); got != 0 {
				t.Errorf("global: remaining = %d, want 0", got)
			}
			// The tokens are really there, not just reported.
			res, err := tenant.Allow(ctx, "a", 3)
			if err != nil || !res.Allowed || res.Remaining != 0 {
				t.Errorf("tenant a: Allow(3) = %v, %v; want allowed with 0 remaining", res, err)
			}
			checkTTLs(t, rdb, prefix)
		})
	}
}

func TestLayeredAllowReturnsTightest(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	tight := newNamed(t, rdb, prefix, "tight", limiters.SlidingLog, limiters.PerHour(5))
	loose := newNamed(t, rdb, prefix, "loose", limiters.TokenBucket, limiters.PerHour(100))
	for i, layers := range [][]limiters.Layer{
		{{Limiter: tight}, {Limiter: loose}},
		{{Limiter: loose}, {Limiter: tight}},
	} {
		lay, err := limiters.NewLayered(layers...)
		if err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprint("k", i)
		res, err := lay.Allow(ctx, key, 2)
		if err != nil || !res.Allowed {
			t.Fatalf("order %d: %v, %v; want allowed", i, res, err)
		}
		if res.Name != "tight" || res.Remaining != 3 || res.Algorithm != limiters.SlidingLog {
			t.Errorf("order %d: result %v (name %q, remaining %d), want the tight layer's, remaining 3", i, res, res.Name, res.Remaining)
		}
		if got := remaining(t, loose, key); got != 98 {
			t.Errorf("order %d: loose layer remaining = %d, want 98 (charged too)", i, got)
		}
		pk, err := lay.Peek(ctx, key, 1)
		if err != nil || !pk.Allowed || pk.Name != "tight" || pk.Remaining != 2 {
			t.Errorf("order %d: Peek = %v (remaining %d), %v; want allowed by tight, remaining 2", i, pk, pk.Remaining, err)
		}
	}
}

func TestLayeredRefundRefundsEveryLayer(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	type layer struct {
		lim    *limiters.Redis
		key    string
		global bool
		cap    int64
	}
	ls := []layer{
		{lim: newNamed(t, rdb, prefix, "tb", limiters.TokenBucket, limiters.PerHour(5)), cap: 5},
		{lim: newNamed(t, rdb, prefix, "lb", limiters.LeakyBucket, limiters.PerHour(6)), cap: 6},
		{lim: newNamed(t, rdb, prefix, "fw", limiters.FixedWindow, limiters.Limit{Rate: 7, Period: day}), cap: 7},
		{lim: newNamed(t, rdb, prefix, "swl", limiters.SlidingLog, limiters.Limit{Rate: 8, Period: day}), global: true, cap: 8},
		{lim: newNamed(t, rdb, prefix, "swc", limiters.SlidingCounter, limiters.Limit{Rate: 9, Period: day}), cap: 9},
	}
	var layers []limiters.Layer
	for i := range ls {
		l := limiters.Layer{Limiter: ls[i].lim}
		ls[i].key = "u"
		if ls[i].global {
			l.Key = limiters.Global
			ls[i].key = limiters.GlobalKey
		}
		layers = append(layers, l)
	}
	lay, err := limiters.NewLayered(layers...)
	if err != nil {
		t.Fatal(err)
	}
	res, err := lay.Allow(ctx, "u", 2)
	if err != nil || !res.Allowed || res.Name != "tb" || res.Remaining != 3 {
		t.Fatalf("Allow = %v (remaining %d), %v; want allowed, tightest tb with 3", res, res.Remaining, err)
	}
	for _, l := range ls {
		if got := remaining(t, l.lim, l.key); got != l.cap-2 {
			t.Fatalf("%s: remaining = %d after Allow(2), want %d", l.lim.Config().Name, got, l.cap-2)
		}
	}
	if err := res.Cancel(ctx); err != nil {
		t.Fatalf("Refund: %v", err)
	}
	for _, l := range ls {
		if got := remaining(t, l.lim, l.key); got != l.cap {
			t.Errorf("%s: remaining = %d after Refund, want %d (all of it back)", l.lim.Config().Name, got, l.cap)
		}
	}
	checkTTLs(t, rdb, prefix)
}

// brokenClient talks to a loopback port nothing listens on.
func brokenClient(t *testing.T) *redis.Client {
	t.Helper()
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{
		Addr:          fmt.Sprintf("127.0.0.1:%d", port),
		DialTimeout:   200 * time.Millisecond,
		DialerRetries: 1,
		MaxRetries:    -1,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

func TestFailurePolicy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	broken := brokenClient(t)
	for _, alg := range limiters.Algorithms() {
		var observed atomic.Int64
		cfg := limiters.Config{
			Name: "p", Algorithm: alg, Limit: limiters.PerSecond(5), Prefix: redistest.Prefix(t),
			Observe: func(_ limiters.Algorithm, _ string, _ time.Duration, err error) {
				if err != nil {
					observed.Add(1)
				}
			},
		}

		cfg.Failure = limiters.FailOpen
		open, err := limiters.New(broken, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, call := range []struct {
			name string
			f    func(context.Context, string, int64) (limiters.Result, error)
		}{{"Allow", open.Allow}, {"Peek", open.Peek}} {
			res, err := call.f(ctx, "k", 1)
			if err != nil || !res.Allowed || !res.FailedOpen {
				t.Errorf("%s fail open: %s = %v, %v; want allowed, FailedOpen and no error", alg, call.name, res, err)
			}
			if c := res.Cause; !errors.Is(c, limiters.ErrFailedOpen) || !errors.Is(c, limiters.ErrRedis) || errors.Is(c, limiters.ErrFailedClosed) {
				t.Errorf("%s fail open: %s Cause = %v; want ErrFailedOpen wrapping ErrRedis", alg, call.name, c)
			}
		}
		// A failed-open admission charged nothing: its Cancel does nothing
		// and reaches no Redis.
		res, _ := open.Allow(ctx, "k", 1)
		if err := res.Cancel(ctx); err != nil {
			t.Errorf("%s fail open: Cancel = %v, want nil (nothing was charged)", alg, err)
		}
		// A refund cannot fail open: a charge made while Redis answered,
		// cancelled once it no longer does, reports the Redis error.
		live := redistest.Client(t) // closed below, on purpose
		lim, err := limiters.New(live, cfg)
		if err != nil {
			t.Fatal(err)
		}
		res, err = lim.Allow(ctx, "k", 1)
		if err != nil || !res.Allowed || res.FailedOpen {
			t.Fatalf("%s: Allow on a live Redis = %v, %v", alg, res, err)
		}
		live.Close()
		if err := res.Cancel(ctx); !errors.Is(err, limiters.ErrRedis) || errors.Is(err, limiters.ErrFailedOpen) {
			t.Errorf("%s fail open: Cancel = %v, want ErrRedis", alg, err)
		}
		// A cost that can never fit is an error, not a fail-open admission.
		res, err = open.Allow(ctx, "k", 6)
		if res.Allowed || res.FailedOpen || !errors.Is(err, limiters.ErrCostExceedsCapacity) {
			t.Errorf("%s fail open: Allow(6) = %v, %v; want rejected, ErrCostExceedsCapacity", alg, res, err)
		}

		cfg.Failure = limiters.FailClosed
		closed, err := limiters.New(broken, cfg)
		if err != nil {
			t.Fatal(err)
		}
		res, err = closed.Allow(ctx, "k", 1)
		if res.Allowed || res.FailedOpen || res.RetryAfter <= 0 || !errors.Is(err, limiters.ErrFailedClosed) || errors.Is(err, limiters.ErrFailedOpen) {
			t.Errorf("%s fail closed: Allow = %v, %v; want rejected with a RetryAfter and ErrFailedClosed", alg, res, err)
		}
		if got := observed.Load(); got != 5 {
			t.Errorf("%s: Observe saw %d failed calls, want 5", alg, got)
		}
	}
}

// A server that accepts connections and never answers: Config.Timeout
// bounds the call, and the policy decides.
func TestFailurePolicyTimeout(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	done := make(chan struct{})
	t.Cleanup(func() { close(done); ln.Close(); conns.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() { defer conns.Done(); <-done; c.Close() }()
		}
	}()
	// go-redis applies a context's deadline to the socket only with
	// ContextTimeoutEnabled; without it, ReadTimeout (3s) bounds the call.
	rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	for _, policy := range []limiters.Policy{limiters.FailOpen, limiters.FailClosed} {
		lim, err := limiters.New(rdb, limiters.Config{Name: "slow", Limit: limiters.PerSecond(5), Prefix: redistest.Prefix(t),
			Failure: policy, Timeout: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		res, err := lim.Allow(context.Background(), "k", 1)
		took := time.Since(start)
		want := limiters.ErrFailedClosed
		if policy == limiters.FailOpen {
			want = limiters.ErrFailedOpen
			err = res.Cause
		}
		if !errors.Is(err, want) || res.Allowed != (policy == limiters.FailOpen) || res.FailedOpen != (policy == limiters.FailOpen) {
			t.Errorf("%v: Allow = %v, %v; want %v", policy, res, err, want)
		}
		if took > time.Second {
			t.Errorf("%v: Allow took %v with Timeout 50ms", policy, took)
		}
	}
}

func TestLayeredFailure(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	broken := brokenClient(t)
	for _, policy := range []limiters.Policy{limiters.FailClosed, limiters.FailOpen} {
		tenant := newNamed(t, rdb, prefix, "tenant_"+policy.String(), limiters.TokenBucket, limiters.PerHour(5))
		global, err := limiters.New(broken, limiters.Config{Name: "global", Limit: limiters.PerHour(100), Prefix: prefix, Failure: policy})
		if err != nil {
			t.Fatal(err)
		}
		lay, err := limiters.NewLayered(limiters.Layer{Limiter: tenant}, limiters.Layer{Limiter: global, Key: limiters.Global})
		if err != nil {
			t.Fatal(err)
		}
		res, err := lay.Allow(ctx, "a", 2)
		switch policy {
		case limiters.FailClosed:
			// The broken layer rejects; the tenant layer is refunded.
			if res.Allowed || !errors.Is(err, limiters.ErrFailedClosed) {
				t.Errorf("fail closed: Allow = %v, %v; want rejected, ErrFailedClosed", res, err)
			}
			if got := remaining(t, tenant, "a"); got != 5 {
				t.Errorf("fail closed: tenant remaining = %d, want 5 (refunded)", got)
			}
		case limiters.FailOpen:
			// The broken layer lets it through; the tenant layer decided.
			if err != nil || !res.Allowed || !res.FailedOpen || !errors.Is(res.Cause, limiters.ErrFailedOpen) {
				t.Errorf("fail open: Allow = %v (cause %v), %v; want allowed, FailedOpen", res, res.Cause, err)
			}
			if got := remaining(t, tenant, "a"); got != 3 {
				t.Errorf("fail open: tenant remaining = %d, want 3 (charged)", got)
			}
		}
	}
}

// countingLimiter counts the calls that reach it and decides with decide
// (or passes them to next).
type countingLimiter struct {
	calls, refunds atomic.Int64
	decide         func(key string, cost int64) (limiters.Result, error)
	next           limiters.Limiter
}

// Allow attaches a Cancel that counts refunds (and passes them on), as a
// third-party Limiter would with WithCancel.
func (c *countingLimiter) Allow(ctx context.Context, key string, cost int64) (limiters.Result, error) {
	c.calls.Add(1)
	var r limiters.Result
	var err error
	if c.next != nil {
		r, err = c.next.Allow(ctx, key, cost)
	} else {
		r, err = c.decide(key, cost)
	}
	if err != nil || !r.Allowed {
		return r, err
	}
	return r.WithCancel(func(ctx context.Context) error {
		c.refunds.Add(1)
		return r.Cancel(ctx)
	}), nil
}

func (c *countingLimiter) Peek(ctx context.Context, key string, cost int64) (limiters.Result, error) {
	c.calls.Add(1)
	if c.next != nil {
		return c.next.Peek(ctx, key, cost)
	}
	return c.decide(key, cost)
}

func TestPrefilterBlocksUntilRetryAfter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clocktest.New(time.Unix(1_800_000_000, 0))
	const retry = 2 * time.Second
	inner := &countingLimiter{decide: func(_ string, cost int64) (limiters.Result, error) {
		if cost >= 3 {
			return limiters.Result{Allowed: false, Remaining: 2, RetryAfter: retry}, nil
		}
		return limiters.Result{Allowed: true, Remaining: 2 - cost}, nil
	}}
	p := limiters.NewPrefilter(inner, 0, clk)

	type step struct {
		advance time.Duration
		peek    bool
		key     string
		cost    int64
		allowed bool
		retry   time.Duration
		calls   int64 // calls that reached inner so far
	}
	for i, s := range []step{
		{key: "k", cost: 3, allowed: false, retry: retry, calls: 1},
		{advance: 500 * time.Millisecond, key: "k", cost: 3, retry: 1500 * time.Millisecond, calls: 1}, // local
		{key: "k", cost: 5, retry: 1500 * time.Millisecond, calls: 1},                                  // a larger cost: local
		{peek: true, key: "k", cost: 4, retry: 1500 * time.Millisecond, calls: 1},                      // Peek too
		{key: "k", cost: 2, allowed: true, calls: 2},                                                   // a smaller cost may fit: asks
		{key: "other", cost: 3, retry: retry, calls: 3},                                                // another key asks
		{advance: retry - 500*time.Millisecond - time.Nanosecond, key: "k", cost: 3, retry: time.Nanosecond, calls: 3},
		{advance: time.Nanosecond, key: "k", cost: 3, retry: retry, calls: 4}, // RetryAfter passed: asks again
		{key: "k", cost: 3, retry: retry, calls: 4},                           // and is blocked again
		{advance: retry / 2, key: "other", cost: 3, retry: retry, calls: 5},   // "other" expired first
	} {
		clk.Advance(s.advance)
		f := p.Allow
		if s.peek {
			f = p.Peek
		}
		before := inner.calls.Load()
		res, err := f(ctx, s.key, s.cost)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if res.Allowed != s.allowed || res.RetryAfter != s.retry {
			t.Errorf("step %d: got allowed=%v retry=%v, want allowed=%v retry=%v", i, res.Allowed, res.RetryAfter, s.allowed, s.retry)
		}
		if local := inner.calls.Load() == before; local && res.Remaining != 0 {
			t.Errorf("step %d: a local rejection reports remaining %d, want 0", i, res.Remaining)
		}
		if got := inner.calls.Load(); got != s.calls {
			t.Errorf("step %d: %d calls reached the limiter, want %d", i, got, s.calls)
		}
	}
	if got := p.Blocked(); got != 2 {
		t.Errorf("Blocked() = %d, want 2 (k and other)", got)
	}
	res, err := p.Allow(ctx, "k", 1)
	if err != nil || !res.Allowed {
		t.Fatalf("Allow(k, 1) = %v, %v; want allowed", res, err)
	}
	if err := res.Cancel(ctx); err != nil || inner.refunds.Load() != 1 {
		t.Errorf("Cancel = %v, %d refunds reached the limiter; want it passed through", err, inner.refunds.Load())
	}
	if got := p.Blocked(); got != 1 {
		t.Errorf("after Cancel: Blocked() = %d, want 1 (k forgotten: the refund may have made room)", got)
	}
}

func TestPrefilterCachesOnlyRejections(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clocktest.New(time.Unix(1_800_000_000, 0))
	var answer atomic.Int64
	errBroken := fmt.Errorf("%w: %w", limiters.ErrFailedClosed, errors.New("connection refused"))
	inner := &countingLimiter{decide: func(string, int64) (limiters.Result, error) {
		switch answer.Load() {
		case 0:
			return limiters.Result{Allowed: true}, nil
		case 1: // a failed-closed rejection is not a decision about the key
			return limiters.Result{Allowed: false, RetryAfter: time.Second}, errBroken
		default: // a rejection without a RetryAfter
			return limiters.Result{Allowed: false}, nil
		}
	}}
	p := limiters.NewPrefilter(inner, 0, clk)
	for a := int64(0); a < 3; a++ {
		answer.Store(a)
		before := inner.calls.Load()
		for i := 0; i < 3; i++ {
			p.Allow(ctx, "k", 1)
		}
		if got := inner.calls.Load() - before; got != 3 {
			t.Errorf("answer %d: %d of 3 calls reached the limiter, want all", a, got)
		}
		if got := p.Blocked(); got != 0 {
			t.Errorf("answer %d: Blocked() = %d, want 0", a, got)
		}
	}
}

func TestPrefilterMaxKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clocktest.New(time.Unix(1_800_000_000, 0))
	inner := &countingLimiter{decide: func(string, int64) (limiters.Result, error) {
		return limiters.Result{Allowed: false, RetryAfter: time.Second}, nil
	}}
	const maxKeys = 3
	p := limiters.NewPrefilter(inner, maxKeys, clk)
	allowAll := func(n int) {
		for i := 0; i < n; i++ {
			p.Allow(ctx, fmt.Sprint("k", i), 1)
			if got := p.Blocked(); got > maxKeys {
				t.Fatalf("Blocked() = %d, over MaxKeys %d", got, maxKeys)
			}
		}
	}
	allowAll(10)
	if got := inner.calls.Load(); got != 10 {
		t.Fatalf("first round: %d calls, want 10", got)
	}
	allowAll(10) // k0..k2 are remembered; k3..k9 ask again
	if got := inner.calls.Load(); got != 10+7 {
		t.Fatalf("second round: %d calls in all, want 17", got)
	}
	// Once the remembered keys have expired, a new rejection takes a place.
	clk.Advance(time.Second)
	p.Allow(ctx, "k5", 1)
	p.Allow(ctx, "k5", 1)
	if got := inner.calls.Load(); got != 18 {
		t.Errorf("after expiry: %d calls, want 18 (k5 asked once, then blocked)", got)
	}
	if got := p.Blocked(); got != 1 {
		t.Errorf("after expiry: Blocked() = %d, want 1", got)
	}
}

func TestPrefilterConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clocktest.New(time.Unix(1_800_000_000, 0))
	inner := &countingLimiter{decide: func(key string, cost int64) (limiters.Result, error) {
		if cost > 1 {
			return limiters.Result{Allowed: false, RetryAfter: 10 * time.Millisecond}, nil
		}
		return limiters.Result{Allowed: true}, nil
	}}
	const maxKeys = 5
	p := limiters.NewPrefilter(inner, maxKeys, clk)
	var wg sync.WaitGroup
	var wrong atomic.Int64
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				cost := int64(1 + i%2)
				res, err := p.Allow(ctx, fmt.Sprint("k", (g+i)%20), cost)
				if err != nil || res.Allowed != (cost == 1) {
					wrong.Add(1)
				}
				if i%50 == 0 {
					clk.Advance(time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	if n := wrong.Load(); n != 0 {
		t.Errorf("%d decisions differ from the inner limiter's", n)
	}
	if got := p.Blocked(); got > maxKeys {
		t.Errorf("Blocked() = %d, over MaxKeys %d", got, maxKeys)
	}
	if calls := inner.calls.Load(); calls >= 8*300 {
		t.Errorf("all %d calls reached the limiter; the prefilter saved none", calls)
	}
}

// On a real Redis limiter: a rejected key stops costing round trips.
func TestPrefilterOverRedis(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := context.Background()
	lim := newNamed(t, rdb, redistest.Prefix(t), "pf", limiters.TokenBucket, limiters.PerHour(1))
	inner := &countingLimiter{next: lim}
	clk := clocktest.New(time.Now())
	p := limiters.NewPrefilter(inner, 10, clk)
	if res, err := p.Allow(ctx, "k", 1); err != nil || !res.Allowed {
		t.Fatalf("first: %v, %v; want allowed", res, err)
	}
	res, err := p.Allow(ctx, "k", 1)
	if err != nil || res.Allowed || res.RetryAfter < 59*time.Minute {
		t.Fatalf("second: %v, %v; want rejected for about an hour", res, err)
	}
	for i := 0; i < 5; i++ {
		clk.Advance(time.Minute)
		res, err := p.Allow(ctx, "k", 1)
		if err != nil || res.Allowed {
			t.Fatalf("while blocked: %v, %v; want rejected", res, err)
		}
	}
	if got := inner.calls.Load(); got != 2 {
		t.Errorf("%d calls reached Redis, want 2", got)
	}
}

// A Limiter from outside the package makes its charges cancellable with
// WithCancel, and Layered refunds it through that, on a rejection by a
// later layer and on the whole result's Cancel.
func TestLayeredCancelsThirdPartyLimiter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	allow := &countingLimiter{decide: func(string, int64) (limiters.Result, error) {
		return limiters.Result{Allowed: true, Remaining: 1}, nil
	}}
	reject := &countingLimiter{decide: func(string, int64) (limiters.Result, error) {
		return limiters.Result{RetryAfter: time.Second}, nil
	}}
	lay, err := limiters.NewLayered(limiters.Layer{Limiter: allow}, limiters.Layer{Limiter: reject})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := lay.Allow(ctx, "k", 1); err != nil || res.Allowed {
		t.Fatalf("Allow = %v, %v; want rejected by the second layer", res, err)
	}
	if got := allow.refunds.Load(); got != 1 {
		t.Errorf("after a rejection: first layer refunded %d times, want 1", got)
	}
	both, err := limiters.NewLayered(limiters.Layer{Limiter: allow}, limiters.Layer{Limiter: allow})
	if err != nil {
		t.Fatal(err)
	}
	res, err := both.Allow(ctx, "k", 1)
	if err != nil || !res.Allowed {
		t.Fatalf("Allow = %v, %v; want allowed", res, err)
	}
	cp := res
	for range 2 { // the Result and its copy share one Cancel
		if err := cp.Cancel(ctx); err != nil {
			t.Fatal(err)
		}
		if err := res.Cancel(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := allow.refunds.Load(); got != 3 {
		t.Errorf("after Cancel of a two-layer result: %d refunds in all, want 3 (1 + one per layer, once)", got)
	}
	if err := (limiters.Result{}).Cancel(ctx); err != nil {
		t.Errorf("zero Result: Cancel = %v, want nil", err)
	}
}
