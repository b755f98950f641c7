package rlheader_test

import (
	"net/http"
	"testing"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/rlheader"
	"github.com/shaper-io/shaper/internal/sizing"
)

// fuzzMappings are Mappings over the fuzzed fields: every ResetUnit on
// X-RateLimit-Reset, a used/max field, windows aligned or drained, a
// refusal, and RateLimit under another name.
func fuzzMappings() []rlheader.Mapping {
	var ms []rlheader.Mapping
	for _, u := range []string{"", "s", "ms", "epoch_s", "epoch_ms", "iso8601", "weeks"} {
		ms = append(ms, rlheader.Mapping{Name: "unit-" + u, Remaining: "X-RateLimit-Remaining",
			Limit: "X-RateLimit-Limit", Reset: "X-RateLimit-Reset", ResetUnit: u})
	}
	return append(ms,
		rlheader.Mapping{Name: "used", UsedOf: "X-Used", Drain: 7 * sizing.MaxInterval / 1e5},
		rlheader.Mapping{Name: "keyed", UsedOf: "X-Used", UsedKey: "k", WindowHeader: "X-Window", WindowUnit: "ms", Aligned: true},
		rlheader.Mapping{Name: "window", Remaining: "RateLimit-Remaining", WindowHeader: "X-Window", Window: sizing.MaxInterval * 2},
		rlheader.Mapping{Name: "refused", Refused: "X-Refused", Reset: "X-RateLimit-Reset", ResetUnit: "epoch_ms", Hold: -1},
		rlheader.Mapping{Name: "field", Field: "X-Field", PolicyField: "RateLimit-Policy"},
	)
}

// Malformed, negative, huge and mixed fields, read by Parse, by every
// profile and by fuzzMappings: nothing panics, every limit is in range
// and keeps the package's rules, and Binding picks one of them.
func FuzzParse(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add(s[0], s[1], s[2], s[3], s[4], s[5])
	}
	f.Fuzz(parseInput)
}

var parseSeeds = [][6]string{
	{"limit=100, remaining=50, reset=5", `"d";q=100;w=60`, "7", "30", "100", ""},
	{`"burst";r=0;t=1, "day";r=9;t=86400`, `"burst";q=5;w=1`, "-1", "1800000042", "", "Wed, 21 Oct 2015 07:28:00 GMT"},
	{"remaining=1e99, reset=-5", "", "18446744073709551616", "1800000001500", "abc", "3.5"},
	{`"a;t=86400;b";r=5;t=1`, `"a;t=86400;b";q=3;w=1`, "5, 0", "2026-12-03T10:00:00Z", "10, 10;w=1", "30, 1e300"},
}

// TestParseMutations runs FuzzParse's body on 3000 mutations of its
// corpus, as `go test -fuzz FuzzParse -fuzztime 3000x` would, in the normal
// test run (see redistest.Mutations).
func TestParseMutations(t *testing.T) {
	var seeds [][]any
	for _, s := range parseSeeds {
		seeds = append(seeds, []any{s[0], s[1], s[2], s[3], s[4], s[5]})
	}
	redistest.EachMutation(t, "FuzzParse", 1, 3000, seeds, func(in []any) {
		parseInput(t, in[0].(string), in[1].(string), in[2].(string), in[3].(string), in[4].(string), in[5].(string))
	})
}

// parseInput is FuzzParse's body.
func parseInput(t *testing.T, rl, policy, rem, reset, limit, retry string) {
	h := header("RateLimit", rl, "RateLimit-Policy", policy, "X-RateLimit-Remaining", rem,
		"X-RateLimit-Reset", reset, "X-RateLimit-Limit", limit, "Retry-After", retry,
		"RateLimit-Remaining", rem, "RateLimit-Reset", reset,
		"X-Rate-Limit-Remaining", limit, "X-Rate-Limit-Reset-After", retry, "Date", retry,
		"X-Shopify-Shop-Api-Call-Limit", rem+"/"+limit, "Sforce-Limit-Info", "api-usage="+rem+"/"+limit,
		"X-Used", "k="+rem+"/"+limit+", "+reset, "X-Window", reset, "X-Refused", "",
		"X-HubSpot-RateLimit-Remaining", rem, "X-HubSpot-RateLimit-Max", limit,
		"X-HubSpot-RateLimit-Interval-Milliseconds", reset, "X-HubSpot-RateLimit-Daily-Remaining", limit,
		"X-RateLimit-Remaining-Minute", rem, "X-RateLimit-Limit-Minute", limit, "X-RateLimit-Remaining-Month", reset,
		"Beta-RateLimit", rl, "Beta-RateLimit-Policy", policy, "X-Field", policy, "X-Envoy-Ratelimited", retry)
	ms := fuzzMappings()
	for _, n := range rlheader.Profiles() {
		p, _ := rlheader.Profile(n)
		ms = append(ms, p)
	}
	ls := rlheader.ParseWith(h, now, ms...)
	check(t, h, ls)
	check(t, h, rlheader.Parse(h, now.Add(123456789)))
}

// check fails t unless every limit of ls keeps the package's rules and
// Binding picks one of them.
func check(t *testing.T, h http.Header, ls []rlheader.Limit) {
	t.Helper()
	for _, l := range ls {
		switch {
		case l.Remaining < 0 || l.Remaining > rlheader.MaxUnits || l.Limit < 0 || l.Limit > rlheader.MaxUnits:
			t.Fatalf("units out of range: %+v from %v", l, h)
		case l.Reset < 0 || l.Reset > sizing.MaxInterval || l.Window < 0 || l.Window > sizing.MaxInterval:
			t.Fatalf("durations out of range: %+v from %v", l, h)
		case l.Limit > 0 && l.Remaining > l.Limit:
			t.Fatalf("remaining above the limit: %+v from %v", l, h)
		case l.Remaining == 0 && l.Reset <= 0:
			t.Fatalf("nothing left and no wait: %+v from %v", l, h)
		case l.Source == "" || l.Header == "":
			t.Fatalf("no source or header: %+v from %v", l, h)
		}
	}
	if b, ok := rlheader.Binding(ls); ok {
		found := false
		for _, l := range ls {
			found = found || l == b
		}
		if !found || b.Reset <= 0 {
			t.Fatalf("Binding %+v is not a constraining limit of %+v", b, ls)
		}
	}
}
