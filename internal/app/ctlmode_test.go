package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shaper-io/shaper/internal/app"
)

// ctl mode sets and clears the runtime mode of a downstream's shaping and
// of one of its limiters; status shows the modes in force.
func TestCtlMode(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	path := filepath.Join(t.TempDir(), "shaper.yaml")
	doc := "redis: {url: \"redis://" + srv.Addr + "\"}\ndownstreams:\n  - {name: api, rate: 5/s, handler: {type: log}, shaping_mode: shadow,\n" +
		"     admission: {limiters: [{name: tb, rate: 5/s, mode: shadow}, {name: floor, rate: 100/m}]}}\n"
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	ctl := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := app.Ctl(context.Background(), append([]string{"-config", path}, args...), &out)
		return out.String(), err
	}
	modes := func() map[string]string {
		out, err := ctl("status")
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Downstreams []struct {
				Modes map[string]string `json:"modes"`
			} `json:"downstreams"`
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Downstreams) != 1 {
			t.Fatalf("status: %v\n%s", err, out)
		}
		return st.Downstreams[0].Modes
	}
	if m := modes(); m["shaping"] != "shadow" || m["tb"] != "shadow" || m["floor"] != "enforce" {
		t.Errorf("configured modes %v, want shaping and tb in shadow, floor enforced", m)
	}
	for _, step := range []struct {
		args []string
		say  string
	}{
		{[]string{"mode", "api", "tb", "enforce"}, "api's limiter tb: enforce in every process"},
		{[]string{"mode", "api", "enforce"}, "api's shaping: enforce in every process"},
		{[]string{"mode", "api", "floor", "shadow"}, "api's limiter floor: shadow"},
	} {
		if out, err := ctl(step.args...); err != nil || !strings.Contains(out, step.say) {
			t.Errorf("ctl %v: %q, %v; want %q", step.args, out, err, step.say)
		}
	}
	if m := modes(); m["shaping"] != "enforce" || m["tb"] != "enforce" || m["floor"] != "shadow" {
		t.Errorf("modes after the switches %v, want shaping and tb enforced, floor in shadow", m)
	}
	if out, err := ctl("mode", "api", "tb", "clear"); err != nil || !strings.Contains(out, "back to the config's shadow") {
		t.Errorf("ctl mode api tb clear: %q, %v", out, err)
	}
	if m := modes(); m["tb"] != "shadow" {
		t.Errorf("tb after clear: %s, want the configured shadow", m["tb"])
	}
	for _, bad := range [][]string{{"mode", "api", "nope", "shadow"}, {"mode", "api", "dry"}, {"mode", "other", "shadow"}, {"mode", "api"}} {
		if _, err := ctl(bad...); !errors.Is(err, app.ErrUsage) {
			t.Errorf("ctl %v: %v, want a usage error", bad, err)
		}
	}
}
