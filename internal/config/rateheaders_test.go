package config_test

import (
	"strings"
	"testing"

	"github.com/shaper-io/shaper/internal/config"
)

// rate_headers: a vendor profile by name, or a mapping of the fields; a
// bad one names the field and the value.
func TestRateHeaders(t *testing.T) {
	t.Parallel()
	doc := func(rh string) string {
		return "redis: {url: \"redis://127.0.0.1:1/0\"}\ndownstreams:\n  - {name: api, rate: 5/s, handler: {type: log}, rate_headers: " + rh + "}\n"
	}
	for _, c := range []struct{ rh, err string }{
		{"shopify", ""},
		{"{profile: salesforce}", ""},
		{"{remaining: X-Foo-Left, limit: X-Foo-Max, reset: X-Foo-Reset, reset_unit: epoch_s}", ""},
		{"{used_of: X-Call-Limit, window: 1m}", ""},
		{"nosuchvendor", `rate_headers: unknown profile "nosuchvendor" (profiles: atlassian`},
		{"{remaining: X-Left, reset: X-Reset, reset_unit: fortnights}", `rate_headers: reset_unit "fortnights"`},
		{"{remaining: X-Left, rest: X-Reset}", `rate_headers has no field "rest"`},
		{"{profile: shopify, remaining: X-Left}", "a profile (\"shopify\") takes no other field"},
	} {
		cfg, err := config.Parse([]byte(doc(c.rh)))
		switch {
		case c.err == "" && err != nil:
			t.Errorf("rate_headers: %s: %v", c.rh, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("rate_headers: %s: err %v, want one containing %q", c.rh, err, c.err)
		case c.err == "" && cfg.Downstreams[0].RateHeaders == nil:
			t.Errorf("rate_headers: %s: not kept", c.rh)
		}
	}
}
