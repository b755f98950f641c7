package app_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shaper-io/shaper/internal/app"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/shaping"
)

// shaper ctl rate takes a bare number as per second (as enqueue --rate
// does), refuses a rate the downstream cannot run at (every task would be
// archived) without writing it, and names the downstreams it knows.
func TestCtlRate(t *testing.T) {
	t.Parallel()
	prefix, ctl := ctlOn(t, "  - {name: api, rate: 1/s, handler: {type: log}}\n  - {name: db, rate: 100/s, handler: {type: log}}\n")
	override := func(name string) string {
		st, err := shaping.NewControl(redistest.Client(t), prefix).State(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if st.Override.IsZero() {
			return ""
		}
		return st.Override.RateString()
	}
	if out, err := ctl("rate", "api", "20"); err != nil || !strings.Contains(out, "rate overridden to 20/s") || override("api") != "20/s" {
		t.Errorf("ctl rate api 20: %q, %v, override %q; want 20/s", out, err, override("api"))
	}
	if out, err := ctl("rate", "api", "2.5"); err != nil || override("api") != "5/2s" {
		t.Errorf("ctl rate api 2.5: %q, %v, override %q; want 2.5/s", out, err, override("api"))
	}
	for _, step := range []struct {
		args []string
		want string
	}{
		{[]string{"rate", "api", "1/25h"}, `rate "1/25h" is too slow for api: one release of its largest cost (1) would hold it for 25h0m0s, over the limit of 24h0m0s`},
		// db's largest release is what its bucket holds at 100/s: 100
		{[]string{"rate", "db", "1/h"}, `rate "1/h" is too slow for db: one release of its largest cost (100) would hold it for 100h0m0s`},
		{[]string{"rate", "api", "0"}, `rate must be positive, got "0"`},
		{[]string{"rate", "api", "fast"}, `invalid rate "fast"`},
		{[]string{"rate", "nope", "5/s"}, `unknown downstream "nope" (the config has api, db)`},
	} {
		_, err := ctl(step.args...)
		if !errors.Is(err, app.ErrUsage) || !strings.Contains(err.Error(), step.want) || strings.ContainsAny(err.Error(), "\n") {
			t.Errorf("ctl %s: %v, want one usage line containing %q", strings.Join(step.args, " "), err, step.want)
		}
	}
	if got := override("api"); got != "5/2s" {
		t.Errorf("after refused rates the override is %q, want the last accepted one (2.5/s)", got)
	}
	if got := override("db"); got != "" {
		t.Errorf("db's override %q after a refused rate, want none", got)
	}
}

// ctlOn writes a config of the given downstreams on a fresh prefix of the
// test Redis and returns the prefix and a ctl that runs against it.
func ctlOn(t *testing.T, downstreams string) (string, func(args ...string) (string, error)) {
	t.Helper()
	prefix := redistest.Prefix(t)
	path := filepath.Join(t.TempDir(), "shaper.yaml")
	doc := "redis: {url: \"" + redistest.URL(t) + "\", prefix: " + prefix + "}\ndownstreams:\n" + downstreams
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return prefix, func(args ...string) (string, error) {
		var out bytes.Buffer
		err := app.Ctl(context.Background(), append([]string{"-config", path}, args...), &out)
		return out.String(), err
	}
}
