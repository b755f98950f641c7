package rlheader_test

import (
	"errors"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/rlheader"
)

// Each profile against its vendor's documented example.
func TestProfiles(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	day := 24 * time.Hour
	for _, c := range []struct {
		profile string
		h       http.Header
		now     time.Time // zero: now
		want    []rlheader.Limit
	}{
		// 32 of 40 used, leaking 2/s: 16s until the used part is gone
		{"shopify", header("X-Shopify-Shop-Api-Call-Limit", "32/40"), time.Time{},
			[]rlheader.Limit{{Remaining: 8, Reset: 16 * s, Limit: 40, Source: "shopify"}}},
		// full: one call leaks out in 0.5s (0.3s to the next second)
		{"shopify", header("X-Shopify-Shop-Api-Call-Limit", "40/40"), now.Add(700 * ms),
			[]rlheader.Limit{{Remaining: 0, Reset: 500 * ms, Limit: 40, Source: "shopify"}}},
		{"shopify", header("X-Shopify-Shop-Api-Call-Limit", "0/80"), time.Time{},
			[]rlheader.Limit{{Remaining: 80, Reset: 0, Limit: 80, Source: "shopify"}}},
		{"salesforce", header("Sforce-Limit-Info", "api-usage=18/5000"), time.Time{},
			[]rlheader.Limit{{Remaining: 4982, Reset: day, Limit: 5000, Window: day, Source: "salesforce"}}},
		{"salesforce", header("Sforce-Limit-Info", "api-usage=10018/100000, per-app-api-usage=17/250(appName=sample-connected-app)"), time.Time{},
			[]rlheader.Limit{{Remaining: 89982, Reset: day, Limit: 100000, Window: day, Source: "salesforce"},
				{Remaining: 233, Reset: day, Limit: 250, Window: day, Source: "salesforce"}}},
		{"hubspot", header("X-HubSpot-RateLimit-Daily", "250000", "X-HubSpot-RateLimit-Daily-Remaining", "249971",
			"X-HubSpot-RateLimit-Interval-Milliseconds", "10000", "X-HubSpot-RateLimit-Max", "100",
			"X-HubSpot-RateLimit-Remaining", "97", "X-HubSpot-RateLimit-Secondly", "10", "X-HubSpot-RateLimit-Secondly-Remaining", "9"), time.Time{},
			[]rlheader.Limit{{Remaining: 97, Reset: 10 * s, Limit: 100, Window: 10 * s, Source: "hubspot"},
				{Remaining: 9, Reset: s, Limit: 10, Window: s, Source: "hubspot"},
				{Remaining: 249971, Reset: day, Limit: 250000, Window: day, Source: "hubspot"}}},
		// the server's clock is 50s past a whole hour
		{"kong", header("Date", date(now.Add(50*s)), "X-RateLimit-Limit-Minute", "10", "X-RateLimit-Remaining-Minute", "0",
			"X-RateLimit-Limit-Hour", "100", "X-RateLimit-Remaining-Hour", "40", "X-RateLimit-Limit-Month", "1000",
			"X-RateLimit-Remaining-Month", "900"), time.Time{},
			[]rlheader.Limit{{Remaining: 0, Reset: 10 * s, Limit: 10, Window: time.Minute, Source: "kong"},
				{Remaining: 40, Reset: 3550 * s, Limit: 100, Window: time.Hour, Source: "kong"},
				{Remaining: 900, Reset: day, Limit: 1000, Window: day, Source: "kong"}}},
		{"atlassian", header("Beta-RateLimit-Policy", `"tenant-app-quota";q=100100;w=3600`,
			"Beta-RateLimit", `"tenant-app-quota";r=17842;t=2107`, "X-RateLimit-Limit", "100",
			"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "2027-01-15T08:00:30Z"), time.Time{},
			[]rlheader.Limit{{Remaining: 17842, Reset: 2107 * s, Limit: 100100, Window: time.Hour, Source: "atlassian"},
				{Remaining: 0, Reset: 30 * s, Limit: 100, Source: "atlassian"}}},
		{"envoy", header("X-Envoy-Ratelimited", "true"), time.Time{},
			[]rlheader.Limit{{Reset: rlheader.DefaultHold, Source: "envoy"}}},
		{"envoy", header("X-Envoy-Ratelimited", "true", "X-RateLimit-Reset", "7"), time.Time{},
			[]rlheader.Limit{{Reset: 7 * s, Source: "envoy"}}},
		{"envoy", header("X-Envoy-Ratelimited", "true", "X-RateLimit-Reset", "7", "Retry-After", "12"), time.Time{},
			[]rlheader.Limit{{Reset: 12 * s, Source: "envoy"}}},
		{"envoy", header("X-RateLimit-Reset", "7", "Retry-After", "12"), time.Time{}, nil},
	} {
		m, ok := rlheader.Profile(c.profile)
		if !ok {
			t.Fatalf("no profile %q", c.profile)
		}
		at := c.now
		if at.IsZero() {
			at = now
		}
		if got := bare(m.Parse(c.h, at)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: Parse(%v) = %+v, want %+v", c.profile, c.h, got, c.want)
		}
	}
}

// A Mapping's Reset in each ResetUnit, its window without one, and the
// header lines it names.
func TestMappingParse(t *testing.T) {
	t.Parallel()
	m := func(unit string) rlheader.Mapping {
		return rlheader.Mapping{Name: "api", Remaining: "X-Left", Limit: "X-Max", Reset: "X-Back", ResetUnit: unit}
	}
	for _, c := range []struct {
		name string
		m    rlheader.Mapping
		h    http.Header
		want []rlheader.Limit
	}{
		{"epoch_s", m("epoch_s"), header("X-Left", "3", "X-Max", "9", "X-Back", "1800000020"),
			[]rlheader.Limit{{Remaining: 3, Reset: 20 * s, Limit: 9, Source: "api"}}},
		{"epoch_s takes a small number as a time", m("epoch_s"), header("X-Left", "3", "X-Back", "20"),
			[]rlheader.Limit{{Remaining: 3, Reset: 0, Source: "api"}}},
		{"epoch_ms", m("epoch_ms"), header("X-Left", "3", "X-Back", "1800000020500"),
			[]rlheader.Limit{{Remaining: 3, Reset: 20500 * time.Millisecond, Source: "api"}}},
		{"s", m("s"), header("X-Left", "3", "X-Back", "1800000020"),
			[]rlheader.Limit{{Remaining: 3, Reset: 24 * time.Hour, Source: "api"}}},
		{"ms", m("ms"), header("X-Left", "3", "X-Back", "1500"),
			[]rlheader.Limit{{Remaining: 3, Reset: 1500 * time.Millisecond, Source: "api"}}},
		{"iso8601", m("iso8601"), header("X-Left", "3", "X-Back", "2027-01-15T09:00:00+01:00"),
			[]rlheader.Limit{{Remaining: 3, Reset: 0, Source: "api"}}},
		{"iso8601 not a number", m("iso8601"), header("X-Left", "3", "X-Back", "20"), nil},
		{"auto", m(""), header("X-Left", "3", "X-Back", "2027-01-15T08:01:00.25Z"),
			[]rlheader.Limit{{Remaining: 3, Reset: 60250 * time.Millisecond, Source: "api"}}},
		{"no name", rlheader.Mapping{Remaining: "X-Left", Window: time.Minute}, header("X-Left", "0"),
			[]rlheader.Limit{{Remaining: 0, Reset: time.Minute, Window: time.Minute, Source: rlheader.SourceMapping}}},
		{"absent", m("s"), header("X-Max", "9", "X-Back", "4"), nil},
	} {
		if got := bare(c.m.Parse(c.h, now)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: Parse(%v) = %+v, want %+v", c.name, c.h, got, c.want)
		}
	}
	sh, _ := rlheader.Profile("shopify")
	ls := rlheader.ParseWith(header("X-Shopify-Shop-Api-Call-Limit", "40/40", "Retry-After", "2.0"), now, sh)
	want := []string{"Retry-After: 2.0", "X-Shopify-Shop-Api-Call-Limit: 40/40"}
	if len(ls) != 2 || ls[0].Header != want[0] || ls[1].Header != want[1] {
		t.Errorf("ParseWith(shopify) = %+v, want Headers %q", ls, want)
	}
}

// Validate names each wrong field and what it holds; every profile is
// valid.
func TestMappingValidate(t *testing.T) {
	t.Parallel()
	for _, n := range rlheader.Profiles() {
		p, _ := rlheader.Profile(n)
		if err := p.Validate(); err != nil {
			t.Errorf("profile %s: %v", n, err)
		}
	}
	ok := rlheader.Mapping{Remaining: "X-Left", Reset: "X-Back"}
	for _, c := range []struct {
		name string
		m    rlheader.Mapping
		want []string // "Field=Value"
	}{
		{"zero", rlheader.Mapping{}, []string{"Remaining="}},
		{"unit", rlheader.Mapping{Remaining: "X-Left", Reset: "X-Back", ResetUnit: "minutes"}, []string{"ResetUnit=minutes"}},
		{"no reset", rlheader.Mapping{Remaining: "X-Left"}, []string{"Reset="}},
		{"both", rlheader.Mapping{Remaining: "X-Left", UsedOf: "X-Used", Window: time.Second}, []string{"UsedOf=X-Used"}},
		{"name", rlheader.Mapping{Remaining: "X Left", Reset: "X-Back:"}, []string{"Remaining=X Left", "Reset=X-Back:"}},
		{"negative", rlheader.Mapping{Remaining: "X-Left", Reset: "X-Back", Window: -time.Second}, []string{"Window=-1s"}},
		{"orphans", rlheader.Mapping{Refused: "X-No", UsedKey: "k", WindowUnit: "ms", PolicyField: "P", Aligned: true, Drain: time.Second},
			[]string{"UsedKey=k", "WindowUnit=ms", "Aligned=true", "Drain=1s", "PolicyField=P"}},
		{"hold", rlheader.Mapping{Remaining: "X-Left", Reset: "X-Back", Hold: time.Second}, []string{"Hold=1s"}},
		{"window unit", rlheader.Mapping{Remaining: "X-Left", WindowHeader: "X-W", WindowUnit: "h"}, []string{"WindowUnit=h"}},
		{"also", rlheader.Mapping{Also: []rlheader.Mapping{ok, {Reset: "X-Back", Also: []rlheader.Mapping{ok}}}},
			[]string{"Also[1].Also=1 mappings", "Also[1].Remaining=", "Also[1].Reset=X-Back"}},
	} {
		err := c.m.Validate()
		var got []string
		for _, e := range unjoin(err) {
			var fe *rlheader.FieldError
			if !errors.As(e, &fe) || !errors.Is(e, rlheader.ErrMapping) || !strings.HasPrefix(e.Error(), "rlheader: Mapping."+fe.Field) {
				t.Fatalf("%s: %v is not a FieldError", c.name, e)
			}
			got = append(got, fe.Field+"="+fe.Value)
		}
		slices.Sort(got)
		slices.Sort(c.want)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: Validate = %v, want fields %q", c.name, err, c.want)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v", ok, err)
	}
}

// unjoin is the errors errors.Join joined into err.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

func TestProfileNames(t *testing.T) {
	t.Parallel()
	want := []string{"atlassian", "envoy", "hubspot", "kong", "salesforce", "shopify"}
	if got := rlheader.Profiles(); !reflect.DeepEqual(got, want) {
		t.Errorf("Profiles() = %q, want %q", got, want)
	}
	if _, ok := rlheader.Profile("Shopify"); !ok {
		t.Error("Profile(Shopify) not found")
	}
	if _, ok := rlheader.Profile("nope"); ok {
		t.Error("Profile(nope) found")
	}
	a, _ := rlheader.Profile("kong")
	a.Also[0].Remaining = "changed"
	if b, _ := rlheader.Profile("kong"); b.Also[0].Remaining == "changed" {
		t.Error("a change to Profile's result changed the profile")
	}
}
