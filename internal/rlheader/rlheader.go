// Package rlheader reads the limits a downstream announces in the headers
// of its answers, so that shaper paces itself before it is ever refused:
//
//   - the IETF RateLimit fields (draft-ietf-httpapi-ratelimit-headers) in
//     each of their formats: RateLimit-Limit/-Remaining/-Reset (drafts
//     00-06); RateLimit: limit=100, remaining=50, reset=30 (draft 07);
//     RateLimit: "default";r=50;t=30 with RateLimit-Policy:
//     "default";q=100;w=60 (draft 08 on);
//   - X-RateLimit-Limit/-Remaining/-Reset (and X-Rate-Limit-*), whose
//     Reset is delta seconds or a Unix time in seconds or milliseconds
//     (told apart by size), or X-RateLimit-Reset-After in seconds;
//   - Retry-After (seconds or an HTTP date), on any status: nothing left
//     until then.
//
// Parse never fails: a field it cannot read is left out, a negative
// remaining is 0, and resets are bounded by sizing.MaxInterval.
package rlheader

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/shaper-io/shaper/internal/sizing"
)

// Where a Limit was read.
const (
	SourceRateLimit  = "ratelimit"   // the IETF RateLimit fields
	SourceXRateLimit = "x-ratelimit" // X-RateLimit-* or X-Rate-Limit-*
	SourceRetryAfter = "retry-after" // Retry-After
)

// MaxUnits bounds Remaining and Limit (exact in a float64, as Lua keeps
// numbers).
const MaxUnits = 1 << 53

// Limit is one announced window.
type Limit struct {
	// Remaining is the units the window has left, 0 to MaxUnits.
	Remaining int64
	// Reset is how long until the window resets, 0 to sizing.MaxInterval
	// (0: now, which constrains nothing).
	Reset time.Duration
	// Limit is the window's quota in units; 0 when not said.
	Limit int64
	// Window is the window's length (RateLimit-Policy's w); 0 when not
	// said.
	Window time.Duration
	// Source is SourceRateLimit, SourceXRateLimit or SourceRetryAfter.
	Source string
}

// Parse reads every limit h announces; now places Unix-time resets and
// HTTP dates.
func Parse(h http.Header, now time.Time) []Limit {
	var out []Limit
	out = append(out, ietf(h)...)
	if l, ok := xRateLimit(h, now); ok {
		out = append(out, l)
	}
	if d, ok := retryAfter(h.Get("Retry-After"), now); ok {
		out = append(out, Limit{Reset: d, Source: SourceRetryAfter})
	}
	return out
}

// Binding is the limit that constrains most: of those nothing is left in,
// the one that resets last; otherwise the one with the fewest units per
// second left (Remaining / Reset). ok is false when none constrains
// (none, or all reset now).
func Binding(ls []Limit) (Limit, bool) {
	var best Limit
	found := false
	for _, l := range ls {
		if l.Reset <= 0 {
			continue
		}
		switch {
		case !found:
		case l.Remaining == 0 && best.Remaining == 0:
			if l.Reset <= best.Reset {
				continue
			}
		case best.Remaining == 0:
			continue
		case l.Remaining != 0 && float64(l.Remaining)/l.Reset.Seconds() >= float64(best.Remaining)/best.Reset.Seconds():
			continue
		}
		best, found = l, true
	}
	return best, found
}

// ietf reads the RateLimit fields.
func ietf(h http.Header) []Limit {
	if v := h.Values("RateLimit"); len(v) > 0 {
		if ls := rateLimitField(strings.Join(v, ","), policies(strings.Join(h.Values("RateLimit-Policy"), ","))); len(ls) > 0 {
			return ls
		}
	}
	rem, ok1 := units(h.Get("RateLimit-Remaining"))
	reset, ok2 := seconds(h.Get("RateLimit-Reset"))
	if !ok1 || !ok2 {
		return nil
	}
	lim, _ := units(h.Get("RateLimit-Limit"))
	return []Limit{{Remaining: rem, Reset: reset, Limit: lim, Source: SourceRateLimit}}
}

// policy is one RateLimit-Policy item: its quota and window.
type policy struct {
	quota  int64
	window time.Duration
}

// policies reads RateLimit-Policy items by name (draft 08 on: "name";q=;w=).
func policies(v string) map[string]policy {
	out := map[string]policy{}
	for _, m := range members(v) {
		name, params := item(m)
		var p policy
		if q, ok := units(params["q"]); ok {
			p.quota = q
		}
		if w, ok := seconds(params["w"]); ok {
			p.window = w
		}
		out[name] = p
	}
	return out
}

// rateLimitField reads RateLimit: a dictionary (draft 07) or a list of
// items with r and t parameters (draft 08 on).
func rateLimitField(v string, pol map[string]policy) []Limit {
	ms := members(v)
	dict := map[string]string{}
	for _, m := range ms {
		k, val, ok := strings.Cut(m, "=")
		if k = strings.ToLower(strings.TrimSpace(k)); ok && (k == "limit" || k == "remaining" || k == "reset") {
			val, _, _ = strings.Cut(val, ";")
			dict[k] = strings.TrimSpace(val)
		}
	}
	if len(dict) > 0 {
		rem, ok1 := units(dict["remaining"])
		reset, ok2 := seconds(dict["reset"])
		if !ok1 || !ok2 {
			return nil
		}
		lim, _ := units(dict["limit"])
		return []Limit{{Remaining: rem, Reset: reset, Limit: lim, Source: SourceRateLimit}}
	}
	var out []Limit
	for _, m := range ms {
		name, params := item(m)
		rem, ok1 := units(params["r"])
		reset, ok2 := seconds(params["t"])
		if !ok1 || !ok2 {
			continue
		}
		p := pol[name]
		out = append(out, Limit{Remaining: rem, Reset: reset, Limit: p.quota, Window: p.window, Source: SourceRateLimit})
	}
	return out
}

// xRateLimit reads the X-RateLimit-* (or X-Rate-Limit-*) fields.
func xRateLimit(h http.Header, now time.Time) (Limit, bool) {
	for _, p := range []string{"X-RateLimit-", "X-Rate-Limit-"} {
		rem, ok := units(h.Get(p + "Remaining"))
		if !ok {
			continue
		}
		reset, ok := resetTime(h.Get(p+"Reset"), now)
		if !ok {
			if reset, ok = seconds(h.Get(p + "Reset-After")); !ok {
				continue
			}
		}
		lim, _ := units(h.Get(p + "Limit"))
		return Limit{Remaining: rem, Reset: reset, Limit: lim, Source: SourceXRateLimit}, true
	}
	return Limit{}, false
}

// Unix times from these on are not delta seconds (31 years): seconds from
// 1e9 (2001), milliseconds from 1e12.
const (
	epochSeconds = 1e9
	epochMillis  = 1e12
)

// resetTime reads an X-RateLimit-Reset: delta seconds, or a Unix time in
// seconds or milliseconds, told apart by size.
func resetTime(v string, now time.Time) (time.Duration, bool) {
	f, ok := number(v)
	if !ok {
		return 0, false
	}
	switch {
	case f >= epochMillis:
		f = f/1000 - float64(now.UnixNano())/1e9
	case f >= epochSeconds:
		f -= float64(now.UnixNano()) / 1e9
	}
	return bound(f), true
}

// retryAfter reads Retry-After: delay seconds or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if f, ok := number(v); ok {
		return bound(f), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return bound(t.Sub(now).Seconds()), true
	}
	return 0, false
}

// seconds reads a non-negative number of seconds.
func seconds(v string) (time.Duration, bool) {
	f, ok := number(v)
	if !ok {
		return 0, false
	}
	return bound(f), true
}

// bound turns seconds into a Duration in [0, sizing.MaxInterval].
func bound(f float64) time.Duration {
	f = min(max(f, 0), sizing.MaxInterval.Seconds())
	return time.Duration(math.Ceil(f*1e6)) * time.Microsecond
}

// units reads a count of units: negative is 0, huge is MaxUnits, a
// fraction is rounded down.
func units(v string) (int64, bool) {
	f, ok := number(v)
	if !ok {
		return 0, false
	}
	return int64(min(max(f, 0), MaxUnits)), true
}

// number reads a decimal number (a leading integer of a list such as
// "100, 100;w=60" too); NaN and infinities are not numbers.
func number(v string) (float64, bool) {
	v = strings.TrimSpace(v)
	if i := strings.IndexAny(v, ",;"); i >= 0 {
		v = strings.TrimSpace(v[:i])
	}
	if v == "" || len(v) > 32 {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// members splits a structured field's list at the commas outside quoted
// strings.
func members(v string) []string {
	var out []string
	start, quoted := 0, false
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '\\':
			if quoted {
				i++
			}
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				out = append(out, strings.TrimSpace(v[start:i]))
				start = i + 1
			}
		}
	}
	if s := strings.TrimSpace(v[min(start, len(v)):]); s != "" {
		out = append(out, s)
	}
	return out
}

// item splits a list member into its bare item (unquoted) and its
// parameters (lower-case keys).
func item(m string) (string, map[string]string) {
	parts := strings.Split(m, ";")
	name := strings.Trim(strings.TrimSpace(parts[0]), `"`)
	params := map[string]string{}
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		params[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
	}
	return name, params
}
