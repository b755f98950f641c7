package rlheader

import (
	"cmp"
	"net/http"
	"strings"
	"time"

	"github.com/shaper-io/shaper/internal/sizing"
)

// The ResetUnit values: how a Mapping's Reset header writes the reset.
const (
	// ResetAuto reads what X-RateLimit-Reset may hold: delay seconds, a
	// Unix time in seconds or milliseconds told apart by size, an RFC 3339
	// time or an HTTP date.
	ResetAuto         = ""
	ResetSeconds      = "s"        // delay seconds
	ResetMillis       = "ms"       // delay milliseconds
	ResetEpochSeconds = "epoch_s"  // a Unix time in seconds
	ResetEpochMillis  = "epoch_ms" // a Unix time in milliseconds
	ResetISO8601      = "iso8601"  // an ISO 8601 time with its zone, 2026-12-03T10:00:00Z
)

// resetForms are the ResetUnit values and the forms they read.
var resetForms = map[string]form{
	ResetAuto: formAuto, ResetSeconds: formS, ResetMillis: formMS,
	ResetEpochSeconds: formEpochS, ResetEpochMillis: formEpochMS, ResetISO8601: formISO,
}

// DefaultHold is how long a Mapping's Refused header holds when neither
// Retry-After nor Reset says: Envoy's rate limit service counts in windows
// of a second at the shortest.
const DefaultHold = time.Second

// Mapping names the headers a downstream announces its limits in, for
// formats Parse does not read; Profile gives the built-in ones. It reads,
// each when its headers are named and present:
//
//   - a window: the units left (Remaining, or UsedOf) and when they reset
//     (Reset; when no Reset reads, Drain, or the window from WindowHeader
//     or Window);
//   - RateLimit fields under other names (Field, PolicyField);
//   - a refusal (Refused);
//   - the Mappings in Also.
//
// The zero Mapping reads nothing; Validate reports what a Mapping lacks or
// holds wrongly. Parse reads what it can of an invalid one.
type Mapping struct {
	// Name is the Source of the limits it reads ("": SourceMapping; an
	// Also entry without one takes its parent's).
	Name string

	// Remaining is the header holding the units left.
	Remaining string
	// Limit is the header holding the window's quota (with Remaining).
	Limit string
	// UsedOf, instead of Remaining and Limit, is a header holding
	// "used/max" (Shopify's 32/40) or key=used/max members (Salesforce's
	// api-usage=18/5000; a "(…)" after the numbers is ignored): Remaining
	// is max-used, Limit is max. Of several members, the one with the
	// fewest left.
	UsedOf string
	// UsedKey is the key of the UsedOf members read ("": every member).
	UsedKey string

	// Reset is the header holding when the window resets, written as
	// ResetUnit says.
	Reset string
	// ResetUnit is ResetAuto, ResetSeconds, ResetMillis,
	// ResetEpochSeconds, ResetEpochMillis or ResetISO8601.
	ResetUnit string

	// WindowHeader is a header holding the window's length in WindowUnit:
	// "s" ("", the default) or "ms".
	WindowHeader string
	WindowUnit   string
	// Window is the window's length when WindowHeader does not say it.
	// Without a Reset, the window is the reset: all of it (the worst case
	// of a rolling window), or the time to its next boundary when Aligned.
	Window time.Duration
	// Aligned says the window is fixed and starts on a multiple of its
	// length since the Unix epoch (Kong's seconds, minutes, hours and UTC
	// days), told on the server's clock.
	Aligned bool
	// Drain says the limit is a leaky bucket that a full Limit leaks out
	// of in Drain (Shopify: 40 at 2/s, 20s). Without a Reset, Reset is
	// the time the used part takes to leak out, so the pace
	// Remaining/Reset keeps the bucket from filling and rises to the leak
	// rate as it empties; with nothing left, the time one unit takes to
	// leak, when the next call fits.
	Drain time.Duration

	// Field and PolicyField are headers holding the RateLimit and
	// RateLimit-Policy fields of the IETF draft under other names
	// (Atlassian's Beta-RateLimit), read as Parse reads those.
	Field, PolicyField string

	// Refused is a header whose presence means the call was refused
	// (Envoy's x-envoy-ratelimited): nothing is left until the longer of
	// Retry-After and Reset, or for Hold when neither reads.
	Refused string
	// Hold is how long Refused holds when nothing says (0: DefaultHold).
	Hold time.Duration

	// Also are more limits the same answers announce, each read as a
	// Mapping of its own; an Also entry has no Also.
	Also []Mapping
}

// Parse reads every limit m names that h announces, as Parse does: the
// package's rules hold for them too.
func (m Mapping) Parse(h http.Header, now time.Time) []Limit {
	r := newReader(h, now)
	src := cmp.Or(m.Name, SourceMapping)
	m.read(r, src)
	for _, a := range m.Also {
		a.read(r, cmp.Or(a.Name, src))
	}
	return r.out
}

// read reads m's own limits (not its Also's) as Source src.
func (m Mapping) read(r *reader, src string) {
	if m.Field != "" {
		r.structured(m.Field, m.PolicyField, src)
	}
	if m.Refused != "" {
		m.refused(r, src)
	}
	if m.Remaining != "" || m.UsedOf != "" {
		m.window(r, src)
	}
}

// window reads m's window: what is left, and when it resets.
func (m Mapping) window(r *reader, src string) {
	var rem, lim int64
	var ok bool
	var names []string
	if m.UsedOf != "" {
		rem, lim, ok = usedOf(r.values(m.UsedOf), m.UsedKey)
		names = append(names, m.UsedOf)
	} else {
		rem, ok = fewest(r.values(m.Remaining))
		names = append(names, m.Remaining)
		if m.Limit != "" {
			lim, _ = quota(r.values(m.Limit))
			names = append(names, m.Limit)
		}
	}
	if !ok {
		return
	}
	window := m.Window
	if m.WindowHeader != "" {
		f := formS
		if m.WindowUnit == "ms" {
			f = formMS
		}
		if w, _, found := r.longest(r.values(m.WindowHeader), f); found && w > 0 {
			window = w
			names = append(names, m.WindowHeader)
		}
	}
	window = min(max(window, 0), sizing.MaxInterval)
	reset, abs, found := m.reset(r)
	switch {
	case found:
		names = append(names, m.Reset)
	case m.Drain > 0 && lim > 0:
		unit := m.Drain.Seconds() / float64(lim)
		used := lim - min(rem, lim)
		if rem == 0 {
			used = 1
		}
		reset = bound(unit * float64(used))
	case window > 0 && m.Aligned:
		reset, abs = toBoundary(r.base, window), true
	case window > 0:
		reset = window
	default:
		return
	}
	r.emit(Limit{Remaining: rem, Reset: reset, Limit: lim, Window: window, Source: src}, r.lines(abs, names...))
}

// reset reads m's Reset header.
func (m Mapping) reset(r *reader) (d time.Duration, abs, ok bool) {
	f, known := resetForms[m.ResetUnit]
	if m.Reset == "" || !known {
		return 0, false, false
	}
	return r.longest(r.values(m.Reset), f)
}

// refused reads m's Refused header: present, nothing is left until the
// longer of Retry-After and Reset, or for Hold.
func (m Mapping) refused(r *reader, src string) {
	if len(r.values(m.Refused)) == 0 {
		return
	}
	names := []string{m.Refused}
	d, abs, ok := r.longest(r.values("Retry-After"), formDelay)
	if ok {
		names = append(names, "Retry-After")
	}
	if e, a, found := m.reset(r); found {
		names = append(names, m.Reset)
		if !ok || e > d {
			d, abs, ok = e, a, true
		}
	}
	if !ok {
		d = DefaultHold
		if m.Hold > 0 {
			d = min(m.Hold, sizing.MaxInterval)
		}
	}
	r.emit(Limit{Reset: d, Source: src}, r.lines(abs, names...))
}

// usedOf reads "used/max" members of a field's lines (only those keyed
// key= when key is set; a "(…)" after the numbers ignored): the units
// left and the limit of the one with the fewest left.
func usedOf(lines []string, key string) (rem, lim int64, ok bool) {
	for _, m := range tokens(lines) {
		k, v, keyed := strings.Cut(m, "=")
		if !keyed {
			k, v = "", k
		}
		if key != "" && !strings.EqualFold(strings.TrimSpace(k), key) {
			continue
		}
		if i := strings.IndexByte(v, '('); i >= 0 {
			v = v[:i]
		}
		u, mx, found := strings.Cut(v, "/")
		uf, ok1 := number(u)
		mf, ok2 := number(mx)
		if !found || !ok1 || !ok2 {
			continue
		}
		l := toUnits(mf)
		left := max(l-toUnits(uf), 0)
		if !ok || left < rem {
			rem, lim, ok = left, l, true
		}
	}
	return rem, lim, ok
}
