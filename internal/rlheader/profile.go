package rlheader

import (
	"slices"
	"strings"
	"time"
)

const day = 24 * time.Hour

// profiles are the built-in Mappings by name; Profile's comment says how
// each reads its vendor's headers.
var profiles = map[string]Mapping{
	"shopify": {Name: "shopify", UsedOf: "X-Shopify-Shop-Api-Call-Limit", Drain: 20 * time.Second},
	"salesforce": {Name: "salesforce", UsedOf: "Sforce-Limit-Info", UsedKey: "api-usage", Window: day,
		Also: []Mapping{{UsedOf: "Sforce-Limit-Info", UsedKey: "per-app-api-usage", Window: day}}},
	"hubspot": {Name: "hubspot", Remaining: "X-HubSpot-RateLimit-Remaining", Limit: "X-HubSpot-RateLimit-Max",
		WindowHeader: "X-HubSpot-RateLimit-Interval-Milliseconds", WindowUnit: "ms", Window: 10 * time.Second,
		Also: []Mapping{
			{Remaining: "X-HubSpot-RateLimit-Secondly-Remaining", Limit: "X-HubSpot-RateLimit-Secondly", Window: time.Second},
			{Remaining: "X-HubSpot-RateLimit-Daily-Remaining", Limit: "X-HubSpot-RateLimit-Daily", Window: day},
		}},
	"kong": kong(),
	"atlassian": {Name: "atlassian", Field: "Beta-RateLimit", PolicyField: "Beta-RateLimit-Policy",
		Also: []Mapping{{Remaining: "X-RateLimit-Remaining", Limit: "X-RateLimit-Limit", Reset: "X-RateLimit-Reset"}}},
	"envoy": {Name: "envoy", Refused: "X-Envoy-Ratelimited", Reset: "X-RateLimit-Reset", ResetUnit: ResetSeconds},
}

// kong is the kong profile: one aligned window per header suffix.
func kong() Mapping {
	windows := []struct {
		suffix  string
		length  time.Duration
		aligned bool
	}{{"Second", time.Second, true}, {"Minute", time.Minute, true}, {"Hour", time.Hour, true},
		{"Day", day, true}, {"Month", 30 * day, false}, {"Year", 365 * day, false}}
	m := Mapping{Name: "kong"}
	for _, w := range windows {
		m.Also = append(m.Also, Mapping{Remaining: "X-RateLimit-Remaining-" + w.suffix,
			Limit: "X-RateLimit-Limit-" + w.suffix, Window: w.length, Aligned: w.aligned})
	}
	return m
}

// Profile is the built-in Mapping named name (case-insensitive; Profiles
// lists them), a copy the caller may change. Each is its limits' Source:
//
//   - shopify: X-Shopify-Shop-Api-Call-Limit: 32/40, a leaky bucket of 40
//     calls leaking 2/s (80 at 4/s on Plus: either drains in 20s). Reset
//     is the time the used part takes to leak out (32/40: 16s), or with
//     nothing left the time one call takes (0.5s); see Mapping.Drain.
//   - salesforce: Sforce-Limit-Info: api-usage=18/5000, and
//     per-app-api-usage=17/250(appName=…) for a connected app, each a
//     rolling 24-hour window: what is left is paced over a whole day.
//   - hubspot: X-HubSpot-RateLimit-Max and -Remaining over
//     X-HubSpot-RateLimit-Interval-Milliseconds (10s when absent), -Secondly
//     and -Secondly-Remaining over a second, and -Daily and
//     -Daily-Remaining over a day (their reset, midnight in the account's
//     time zone, is not sent: what is left is paced over a whole day).
//   - kong: X-RateLimit-Remaining-Minute with X-RateLimit-Limit-Minute, and
//     the same for Second, Hour, Day, Month and Year. Kong's windows are
//     fixed and start on UTC boundaries: each resets at its next boundary
//     on the server's clock; a month or a year, longer than
//     sizing.MaxInterval, holds for that.
//   - atlassian: Beta-RateLimit and Beta-RateLimit-Policy in the IETF draft
//     08 form ("global-app";r=64900;t=3500), and X-RateLimit-Limit,
//     -Remaining and -Reset, whose reset is an ISO 8601 time.
//   - envoy: X-Envoy-Ratelimited on a refused call: nothing left until
//     Retry-After or X-RateLimit-Reset (delay seconds) says, else for
//     DefaultHold. Envoy's x-ratelimit-limit and -remaining are the
//     X-RateLimit family Parse reads.
func Profile(name string) (Mapping, bool) {
	m, ok := profiles[strings.ToLower(name)]
	m.Also = slices.Clone(m.Also)
	return m, ok
}

// Profiles is the names of the built-in Mappings, sorted.
func Profiles() []string {
	names := make([]string, 0, len(profiles))
	for n := range profiles {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
