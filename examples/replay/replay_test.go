// Package replay runs the example of `shaper replay`: shaper.yaml (a
// per-tenant token bucket, and a global limit tried in shadow) against
// arrivals.jsonl (a burst from one tenant in twenty seconds of traffic).
package replay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shaper-io/shaper/internal/app"
	"github.com/shaper-io/shaper/internal/replay"
)

func TestReplayExample(t *testing.T) {
	var out bytes.Buffer
	if err := app.Replay(context.Background(), []string{"-config", "shaper.yaml", "-json", "arrivals.jsonl"}, nil, &out); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Arrivals    int              `json:"arrivals"`
		Downstreams []replay.Summary `json:"downstreams"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || len(got.Downstreams) != 1 {
		t.Fatalf("output %s: %v", out.String(), err)
	}
	s := got.Downstreams[0]
	t.Logf("%d arrivals: admitted %d, rejected %d (%v), in shadow %v; wait p99 %.3fs", got.Arrivals, s.Admitted, s.Rejected,
		s.RejectedBy, s.ShadowRejected, s.Wait.P99)
	// The file is fixed, and so is every decision on it.
	if got.Arrivals != 120 || s.Admitted != 83 || s.Rejected != 37 || s.RejectedBy["billing-tenant"] != 37 ||
		s.ShadowRejected["billing-global"] != 2 || s.Wait.Count != 83 {
		t.Errorf("summary %+v, want 120 arrivals: 83 admitted, 37 rejected by billing-tenant, 2 would-rejects of billing-global in shadow", s)
	}
	out.Reset()
	if err := app.Replay(context.Background(), []string{"-config", "shaper.yaml", "arrivals.jsonl"}, nil, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"admitted 83 · deferred 0 · rejected 37 (billing-tenant 37)", "in shadow, would have rejected: billing-global 2", "shaping wait of 83 tasks"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// The README's quota: 30 per 10s under 10/s holds 53 of the 83 tasks
// past the slot the rate alone gives them.
func TestReplayExampleWithAQuota(t *testing.T) {
	yaml, err := os.ReadFile("shaper.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "shaper.yaml")
	withQuota := strings.Replace(string(yaml), "    rate: 10/s\n", "    rate: 10/s\n    quotas: [{limit: 30, per: 10s}]\n", 1)
	if err := os.WriteFile(cfg, []byte(withQuota), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := app.Replay(context.Background(), []string{"-config", cfg, "arrivals.jsonl"}, nil, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"downstream billing (rate 10/s, quotas 30/10s): 120 arrivals", "admitted 83 · deferred 0 · rejected 37",
		"slots moved later by: quota 30/10s 53", "max 7.597s; last slot 2026-01-02T15:00:25.794962Z"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
