package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestSafeKey(t *testing.T) {
	for i, c := range []struct{ in, want string }{
		{"acme", "acme"},
		{"tenant-7 ü 日本 😀", "tenant-7 ü 日本 😀"},
		{"", ""},
		{`back\slash \u202e`, `back\slash \u202e`}, // already escaped: unchanged
		{"a\u202eb", `a\u202eb`},
		{"\u202a\u202b\u202c\u202d\u202e", `\u202a\u202b\u202c\u202d\u202e`},
		{"\u2066\u2067\u2068\u2069", `\u2066\u2067\u2068\u2069`},
		{"\u200e\u200f\u061c", `\u200e\u200f\u061c`},
		{"zero\u200bwidth\ufeff", `zero\u200bwidth\ufeff`},
		{"line\u2028para\u2029", `line\u2028para\u2029`},
		{"bell\x07nul\x00esc\x1b[31m\ttab\nnl\rcr\x7f", `bell\u0007nul\u0000esc\u001b[31m\u0009tab\u000anl\u000dcr\u007f`},
		{"c1\u0085\u009b", `c1\u0085\u009b`},
		{"tag\U000e0001", `tag\U000e0001`},
		{"bad\xff\xfeutf8", `bad\xff\xfeutf8`},
	} {
		got := SafeKey(c.in)
		if got != c.want {
			t.Errorf("step %d: SafeKey(%q) = %q, want %q", i, c.in, got, c.want)
		}
		if again := SafeKey(got); again != got {
			t.Errorf("step %d: SafeKey(SafeKey(%q)) = %q, want %q (idempotent)", i, c.in, again, got)
		}
	}
}

// WithoutKeys drops the series labelled with a tenant key, and the family
// they leave empty, and nothing else.
func TestWithoutKeys(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	m.Fair.KeyReleases.WithLabelValues("api", "acme").Set(3)
	m.Fair.Jain.WithLabelValues("api").Set(0.5)
	m.Releases.WithLabelValues("api").Inc()
	mixed := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "mixed"}, []string{KeyLabel, "other"})
	reg.MustRegister(mixed)
	mixed.WithLabelValues("acme", "").Set(1)
	mixed.WithLabelValues("", "x").Set(2) // an empty label is no label
	full, err := testutil.GatherAndCount(reg, "shaper_fair_key_releases", "shaper_fair_jain_index", "shaper_shaping_releases_total", "mixed")
	if err != nil || full != 5 {
		t.Fatalf("the registry gathers %d series (%v), want 5", full, err)
	}
	g := WithoutKeys(reg)
	for name, want := range map[string]int{"shaper_fair_key_releases": 0, "shaper_fair_jain_index": 1, "shaper_shaping_releases_total": 1, "mixed": 1} {
		if got, err := testutil.GatherAndCount(g, name); err != nil || got != want {
			t.Errorf("WithoutKeys: %d series of %s (%v), want %d", got, name, err, want)
		}
	}
	mfs, _ := g.Gather()
	for _, mf := range mfs {
		if strings.Contains(mf.String(), "acme") {
			t.Errorf("WithoutKeys still serves %s with the key", mf.GetName())
		}
	}
}
