package limiters_test

import (
	"context"
	"testing"

	"github.com/shaper-io/shaper/internal/clocktest"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
)

// A shadow layer decides and is charged like an enforced one, never
// rejects, and neither skips nor un-charges the layers after it.
func TestLayeredShadowLayerChargesButNeverRejects(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	tight := newNamed(t, rdb, prefix, "tight", limiters.TokenBucket, limiters.PerHour(2))
	loose := newNamed(t, rdb, prefix, "loose", limiters.TokenBucket, limiters.PerHour(100))
	mode := limiters.NewModeVar(limiters.Shadow)
	lay, err := limiters.NewLayered(limiters.Layer{Limiter: tight, Mode: mode}, limiters.Layer{Limiter: loose})
	if err != nil {
		t.Fatal(err)
	}
	var wouldReject int
	for i := range 5 {
		res, err := lay.Allow(ctx, "a", 1)
		if err != nil || !res.Allowed {
			t.Fatalf("step %d: %v, %v; want allowed (the tight layer is in shadow)", i, res, err)
		}
		if res.Name != "loose" {
			t.Errorf("step %d: decided by %q, want the enforced layer loose", i, res.Name)
		}
		if len(res.Shadow) != 1 || res.Shadow[0].Name != "tight" {
			t.Fatalf("step %d: Shadow = %v, want one decision of tight", i, res.Shadow)
		}
		if got, want := res.Shadow[0].Outcome(), map[bool]string{true: "allowed", false: "rejected"}[i < 2]; got != want {
			t.Errorf("step %d: shadow outcome %s, want %s", i, got, want)
		}
		if !res.Shadow[0].Allowed {
			wouldReject++
		}
	}
	if wouldReject != 3 {
		t.Errorf("shadow rejections = %d, want 3 (2 of 5 fit a bucket of 2)", wouldReject)
	}
	if got := remaining(t, tight, "a"); got != 0 {
		t.Errorf("tight remaining = %d, want 0: its two admissions were charged", got)
	}
	if got := remaining(t, loose, "a"); got != 95 {
		t.Errorf("loose remaining = %d, want 95: every task charged it", got)
	}

	// Enforced at runtime, the same layer rejects, and charges no other.
	mode.Store(limiters.Enforce)
	res, err := lay.Allow(ctx, "a", 1)
	if err != nil || res.Allowed || res.Name != "tight" || len(res.Shadow) != 0 {
		t.Fatalf("enforced: %v (shadow %v), %v; want rejected by tight", res, res.Shadow, err)
	}
	if got := remaining(t, loose, "a"); got != 95 {
		t.Errorf("loose remaining = %d after an enforced rejection, want 95", got)
	}
}

// A rejection by an enforced layer refunds the shadow layers charged
// before it, as it would had they been enforced; Cancel refunds both.
func TestLayeredEnforcedRejectionRefundsShadowLayers(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	shadow := newNamed(t, rdb, prefix, "shadow", limiters.TokenBucket, limiters.PerHour(10))
	gate := newNamed(t, rdb, prefix, "gate", limiters.SlidingLog, limiters.PerHour(1))
	lay, err := limiters.NewLayered(limiters.Layer{Limiter: shadow, Mode: limiters.NewModeVar(limiters.Shadow)},
		limiters.Layer{Limiter: gate, Key: limiters.Global})
	if err != nil {
		t.Fatal(err)
	}
	first, err := lay.Allow(ctx, "a", 1)
	if err != nil || !first.Allowed {
		t.Fatalf("first: %v, %v", first, err)
	}
	res, err := lay.Allow(ctx, "a", 1)
	if err != nil || res.Allowed || res.Name != "gate" {
		t.Fatalf("second: %v, %v; want rejected by gate", res, err)
	}
	if got := remaining(t, shadow, "a"); got != 9 {
		t.Errorf("shadow remaining = %d after gate's rejection, want 9 (its charge refunded)", got)
	}
	if err := first.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, shadow, "a"); got != 10 {
		t.Errorf("shadow remaining = %d after Cancel, want 10", got)
	}
}

// With every layer in shadow the result is an allowance by no limiter.
func TestLayeredAllShadow(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	lim, err := limiters.New(rdb, limiters.Config{Name: "only", Limit: limiters.PerHour(1), Prefix: redistest.Prefix(t),
		Clock: clocktest.New(t0)})
	if err != nil {
		t.Fatal(err)
	}
	lay, _ := limiters.NewLayered(limiters.Layer{Limiter: lim, Mode: limiters.NewModeVar(limiters.Shadow)})
	ctx := context.Background()
	for i := range 3 {
		res, err := lay.Allow(ctx, "k", 1)
		if err != nil || !res.Allowed || res.Name != "" || len(res.Shadow) != 1 {
			t.Fatalf("step %d: %v (name %q, shadow %v), %v; want allowed by no limiter with one shadow decision", i, res, res.Name, res.Shadow, err)
		}
		if got := res.Shadow[0].Allowed; got != (i == 0) {
			t.Errorf("step %d: shadow allowed = %v, want %v", i, got, i == 0)
		}
	}
	pk, err := lay.Peek(ctx, "k", 1)
	if err != nil || !pk.Allowed || len(pk.Shadow) != 1 || pk.Shadow[0].Allowed {
		t.Errorf("Peek = %v (shadow %v), %v; want allowed, with the shadow layer's rejection", pk, pk.Shadow, err)
	}
}

func TestParseMode(t *testing.T) {
	for _, s := range []string{"enforce", "shadow"} {
		m, err := limiters.ParseMode(s)
		if err != nil || m.String() != s {
			t.Errorf("ParseMode(%q) = %v, %v", s, m, err)
		}
	}
	if _, err := limiters.ParseMode("dry"); err == nil {
		t.Error("ParseMode(dry): no error")
	}
	var nilVar *limiters.ModeVar
	if nilVar.Load() != limiters.Enforce {
		t.Error("a nil ModeVar does not read Enforce")
	}
}
