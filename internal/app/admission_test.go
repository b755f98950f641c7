package app_test

import (
	"context"
	"testing"

	"github.com/shaper-io/shaper/internal/app"
	"github.com/shaper-io/shaper/internal/redistest"
)

// sub_windows reaches the limiter: its state is one HASH in the swc10
// family, not the two-window counter's STRINGs.
func TestBuildAdmissionPassesSubWindows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	cfg := parse(t, "redis: {prefix: "+prefix+"}\ndownstreams:\n  - name: api\n    rate: 1/s\n    handler: {type: log}\n"+
		"    admission: {limiters: [{name: sw, algorithm: sliding_counter, rate: 10/s, sub_windows: 10}]}\n")
	adm, err := app.BuildAdmission(rdb, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := adm["api"].Limiter.Allow(ctx, "t1", 1); err != nil || !res.Allowed {
		t.Fatalf("Allow: %v %v", res, err)
	}
	ks, err := redistest.ScanKeys(ctx, rdb, prefix+":*")
	if err != nil {
		t.Fatal(err)
	}
	if want := prefix + ":lim:{swc10:sw:t1}"; len(ks) != 1 || ks[0] != want {
		t.Fatalf("keys %v, want [%s]", ks, want)
	}
	if typ := rdb.Type(ctx, ks[0]).Val(); typ != "hash" {
		t.Errorf("TYPE %s, want hash", typ)
	}
}
