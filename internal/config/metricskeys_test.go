package config

import (
	"errors"
	"strings"
	"testing"
)

// http.metrics_keys is off by default, a bool, and never serves tenant
// keys beyond this host without a token, allow_unauthenticated or not.
func TestMetricsKeys(t *testing.T) {
	t.Parallel()
	if c := mustParse(t, minimal); c.HTTP.MetricsKeys {
		t.Error("http.metrics_keys is on by default, want off")
	}
	for i, c := range []struct {
		doc      string
		on       bool
		wantPath string // "" accepted
		want     string
	}{
		{"http: {metrics_keys: true}\n", true, "", ""},
		{"http: {metrics_keys: false}\n", false, "", ""},
		{"http: {listen: '0.0.0.0:8080', token_env: SHAPER_TOKEN, metrics_keys: true}\n", true, "", ""},
		{"http: {listen: '[::1]:8080', metrics_keys: true}\n", true, "", ""},
		{"http: {listen: off, metrics_keys: true}\n", true, "", ""},
		{"http: {listen: '0.0.0.0:8080', allow_unauthenticated: true, metrics_keys: true}\n", false, "http.metrics_keys", `"0.0.0.0:8080"`},
		{"http: {listen: ':8080', allow_unauthenticated: true, metrics_keys: true}\n", false, "http.metrics_keys", "token_env"},
		{"http: {metrics_keys: sometimes}\n", false, "", "metrics_keys"},
		{"http: {metrics_keys: 1}\n", false, "", "metrics_keys"},
	} {
		got, err := Parse([]byte(c.doc + minimal))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("step %d: Parse(%q): %v, want it accepted", i, c.doc, err)
		case c.want == "" && got.HTTP.MetricsKeys != c.on:
			t.Errorf("step %d: Parse(%q): metrics_keys %v, want %v", i, c.doc, got.HTTP.MetricsKeys, c.on)
		case c.want != "" && err == nil:
			t.Errorf("step %d: Parse(%q) accepted, want an error naming %q", i, c.doc, c.want)
		case c.want != "":
			var e *Error
			if !errors.As(err, &e) || c.wantPath != "" && e.Path != c.wantPath || !strings.Contains(err.Error(), c.want) {
				t.Errorf("step %d: Parse(%q): %v, want an error at %q naming %q", i, c.doc, err, c.wantPath, c.want)
			}
		}
	}
}
