package lua_test

import (
	"context"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/redistest"
)

const (
	sec = int64(time.Second / time.Microsecond)
	ms  = sec / 1000
)

// brkArgs: ratio 0.5 over 10s with 20 calls at least, cool-down 1s
// doubling up to 3s, a probe every 500ms, 2 successes to close.
func brkArgs(now int64) lua.BreakerArgs {
	return lua.BreakerArgs{Now: now, Window: 10 * sec, MinCalls: 20, RatioPPM: 500000, Cooldown: sec,
		MaxCooldown: 3 * sec, ProbeInterval: 500 * ms, Probes: 2}
}

// brkStep is one call of a breaker step test: at t µs after the start,
// report calls/errors (closed releases, or probes of the half-open state
// begun at since; since -1: the state the last reply named) or, with
// probe, ask for a probe; then the reply's state, moved, granted and
// wait must be as given (wait -1: not checked).
type brkStep struct {
	at            int64
	probe         bool
	probes        bool // outcomes of probes
	since         int64
	calls, errs   int64
	state         int64
	moved, grant  bool
	wait, untilIn int64 // untilIn: Until - now when open (-1: not checked)
}

func runBreaker(t *testing.T, name string, steps []brkStep) {
	t.Helper()
	ctx := context.Background()
	st := lua.New(redistest.Client(t))
	key := keys.New(redistest.Prefix(t)).Breaker(name)
	start := time.Now().UnixMicro()
	var last lua.BreakerReply
	for i, s := range steps {
		a := brkArgs(start + s.at)
		var r lua.BreakerReply
		var err error
		if s.probe {
			r, err = st.ProbeBreaker(ctx, key, a)
		} else {
			since := s.since
			if since == -1 {
				since = last.Since
			}
			r, err = st.ReportBreaker(ctx, key, a, lua.BreakerReport{Probe: s.probes, Since: since, Calls: s.calls, Errors: s.errs})
		}
		if err != nil {
			t.Fatalf("%s step %d: %v", name, i, err)
		}
		if r.State != s.state || r.Moved != s.moved || r.Granted != s.grant {
			t.Errorf("%s step %d: got state %d moved %v granted %v, want state %d moved %v granted %v",
				name, i, r.State, r.Moved, r.Granted, s.state, s.moved, s.grant)
		}
		if s.wait >= 0 && r.Wait != s.wait {
			t.Errorf("%s step %d: got wait %dµs, want %dµs", name, i, r.Wait, s.wait)
		}
		if s.untilIn >= 0 && r.Until-r.Now != s.untilIn {
			t.Errorf("%s step %d: got until now+%dµs, want now+%dµs", name, i, r.Until-r.Now, s.untilIn)
		}
		ttl := redistest.Client(t).PTTL(ctx, key).Val()
		if ttl <= 0 && (r.State != lua.BreakerClosed || r.Moved) {
			t.Errorf("%s step %d: breaker key has no TTL (%v)", name, i, ttl)
		}
		last = r
	}
}

// Opens when the window holds min calls and the ratio is reached, not
// before either; and not at all on a run of successes.
func TestBreakerOpensOnRatioWithMinCalls(t *testing.T) {
	t.Parallel()
	runBreaker(t, "min_calls", []brkStep{
		{at: 0, calls: 19, errs: 19, state: 0, wait: -1, untilIn: -1},                    // 19 of 19 failed: too few calls
		{at: 100 * ms, calls: 1, errs: 0, state: 1, moved: true, wait: -1, untilIn: sec}, // 20 calls, 19 errors: opens for 1s
	})
	runBreaker(t, "ratio", []brkStep{
		{at: 0, calls: 30, errs: 14, state: 0, wait: -1, untilIn: -1},                   // 14/30 < 0.5
		{at: sec, calls: 10, errs: 5, state: 0, wait: -1, untilIn: -1},                  // 19/40
		{at: 2 * sec, calls: 2, errs: 2, state: 1, moved: true, wait: -1, untilIn: sec}, // 21/42 = 0.5
	})
	// 4xx and 429 are successes to the breaker (the dispatcher reports
	// them with errors 0): a thousand of them never open it.
	runBreaker(t, "successes", []brkStep{
		{at: 0, calls: 1000, state: 0, wait: -1, untilIn: -1},
		{at: sec, calls: 1000, state: 0, wait: -1, untilIn: -1},
	})
}

// Errors older than the window no longer count.
func TestBreakerWindowSlides(t *testing.T) {
	t.Parallel()
	runBreaker(t, "window", []brkStep{
		{at: 0, calls: 15, errs: 15, state: 0, wait: -1, untilIn: -1},
		{at: 11 * sec, calls: 6, errs: 6, state: 0, wait: -1, untilIn: -1}, // the 15 left the window: 6 calls
		{at: 12 * sec, calls: 14, errs: 14, state: 1, moved: true, wait: -1, untilIn: sec},
	})
}

// Open: nothing goes until the cool-down ends; then one probe per probe
// interval across all callers; a failed probe reopens with twice the
// cool-down, capped at the max; two successes close it and the next
// opening starts from the first cool-down again.
func TestBreakerHalfOpenProbesReopenAndClose(t *testing.T) {
	t.Parallel()
	runBreaker(t, "probes", []brkStep{
		{at: 0, calls: 20, errs: 20, state: 1, moved: true, wait: -1, untilIn: sec},
		{at: 400 * ms, probe: true, state: 1, wait: 600 * ms, untilIn: 600 * ms},
		// closed releases still in flight when it opened: ignored
		{at: 500 * ms, calls: 5, errs: 0, state: 1, wait: -1, untilIn: 500 * ms},
		{at: sec, probe: true, state: 2, moved: true, grant: true, wait: 0, untilIn: -1},
		{at: sec + 100*ms, probe: true, state: 2, wait: 400 * ms, untilIn: -1},
		// a closed release's outcome while half-open is not a probe's
		{at: sec + 200*ms, calls: 3, errs: 0, state: 2, wait: -1, untilIn: -1},
		{at: sec + 300*ms, probes: true, since: -1, calls: 1, errs: 1, state: 1, moved: true, wait: -1, untilIn: 2 * sec},
		{at: 3*sec + 300*ms, probe: true, state: 2, moved: true, grant: true, wait: 0, untilIn: -1},
		{at: 3*sec + 400*ms, probes: true, since: -1, calls: 1, errs: 1, state: 1, moved: true, wait: -1, untilIn: 3 * sec}, // 4s capped at 3s
		{at: 6*sec + 400*ms, probe: true, state: 2, moved: true, grant: true, wait: 0, untilIn: -1},
		{at: 6*sec + 500*ms, probes: true, since: 5 * sec, calls: 1, state: 2, wait: -1, untilIn: -1}, // a probe of another spell
		{at: 6*sec + 600*ms, probes: true, since: -1, calls: 1, state: 2, wait: -1, untilIn: -1},
		{at: 6*sec + 900*ms, probe: true, state: 2, grant: true, wait: 0, untilIn: -1},
		{at: 7 * sec, probes: true, since: -1, calls: 1, state: 0, moved: true, wait: -1, untilIn: -1},
		{at: 7*sec + 100*ms, probe: true, state: 0, grant: true, wait: 0, untilIn: -1},
		// the window starts empty: 19 errors do not reopen it
		{at: 7*sec + 200*ms, calls: 19, errs: 19, state: 0, wait: -1, untilIn: -1},
		{at: 7*sec + 300*ms, calls: 1, errs: 1, state: 1, moved: true, wait: -1, untilIn: sec},
	})
}

// Every write leaves a TTL: a closed breaker's key lives the window plus
// the margin, an open one's the cool-down left plus the max cool-down.
func TestBreakerTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	st := lua.New(rdb)
	key := keys.New(redistest.Prefix(t)).Breaker("api")
	a := brkArgs(0)
	if _, err := st.ReportBreaker(ctx, key, a, lua.BreakerReport{Calls: 3, Errors: 1}); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 10*time.Second || ttl > 11*time.Second {
		t.Errorf("closed: TTL %v, want in (10s, 11s]", ttl)
	}
	if _, err := st.ReportBreaker(ctx, key, a, lua.BreakerReport{Calls: 30, Errors: 30}); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 4*time.Second || ttl > 5*time.Second {
		t.Errorf("open: TTL %v, want in (4s, 5s] (1s left + 3s max cool-down + 1s)", ttl)
	}
	if n := rdb.HLen(ctx, key).Val(); n > 5 {
		t.Errorf("open breaker hash has %d fields, want the state only (the window is cleared)", n)
	}
}

// A threshold that is not a positive integer is an error, not a breaker
// that never opens.
func TestBreakerRejectsBadArgs(t *testing.T) {
	t.Parallel()
	st := lua.New(redistest.Client(t))
	a := brkArgs(0)
	a.MinCalls = 0
	if _, err := st.ProbeBreaker(context.Background(), keys.New(redistest.Prefix(t)).Breaker("api"), a); err == nil {
		t.Error("min calls 0: no error")
	}
}
