package rlheader

import (
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// Where a Limit was read. A Mapping's limits carry its Name instead.
const (
	SourceRateLimit  = "ratelimit"   // the IETF RateLimit fields
	SourceXRateLimit = "x-ratelimit" // X-RateLimit-* or X-Rate-Limit-*
	SourceRetryAfter = "retry-after" // Retry-After
	SourceMapping    = "mapping"     // a Mapping without a Name
)

// MaxUnits bounds Remaining and Limit (exact in a float64, as Lua keeps
// numbers).
const MaxUnits = 1 << 53

// headerValueMax is the most bytes of one field's value Limit.Header
// keeps.
const headerValueMax = 80

// Limit is one announced window.
type Limit struct {
	// Remaining is the units the window has left, 0 to MaxUnits, and at
	// most Limit when Limit is above 0.
	Remaining int64
	// Reset is how long until the window resets, 0 to sizing.MaxInterval
	// (0: now, which constrains nothing). It is above 0 when Remaining is
	// 0.
	Reset time.Duration
	// Limit is the window's quota in units; 0 when not said.
	Limit int64
	// Window is the window's length (RateLimit-Policy's w, a Mapping's
	// window); 0 when not said.
	Window time.Duration
	// Source is SourceRateLimit, SourceXRateLimit, SourceRetryAfter, or
	// the Name of the Mapping that read it (SourceMapping without one).
	Source string
	// Header is the header lines the limit was read from, "Name: value",
	// lines joined by "; ", a repeated field's values by ", ", each value
	// cut to 80 bytes (a cut ends in "…"); with the Date line when an
	// absolute time was placed on it. It is what to show an operator about
	// a hold.
	Header string
}

// Parse reads every limit h announces in the formats the package doc
// lists; now is the local time (Unix times and HTTP dates are placed on
// h's Date header when it has one).
func Parse(h http.Header, now time.Time) []Limit {
	r := newReader(h, now)
	r.structured("RateLimit", "RateLimit-Policy", SourceRateLimit)
	r.fields()
	for _, p := range xPrefixes {
		r.xRateLimit(p)
	}
	r.retryAfter()
	return r.out
}

// ParseWith is Parse followed by each Mapping's Parse: the limits of the
// standard fields and of the vendor's own.
func ParseWith(h http.Header, now time.Time, ms ...Mapping) []Limit {
	out := Parse(h, now)
	for _, m := range ms {
		out = append(out, m.Parse(h, now)...)
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

// reader reads the header of one answer; the limits it reads gather in
// out.
type reader struct {
	h   http.Header
	now time.Time
	// base is the server's clock that absolute times are placed on: the
	// Date header's time, or now without a readable one.
	base time.Time
	// date is the Date header's value when base is its time.
	date string
	out  []Limit
}

func newReader(h http.Header, now time.Time) *reader {
	r := &reader{h: h, now: now, base: now}
	if v := h.Get("Date"); v != "" && len(v) <= maxTime {
		if t, err := http.ParseTime(v); err == nil {
			r.base, r.date = t, v
		}
	}
	return r
}

// The most of a field read: its first maxLines lines, each of at most
// maxLine bytes (a longer line is not read), so an answer's header costs
// a bounded time to read.
const (
	maxLines = 16
	maxLine  = 8 << 10
)

// values is the lines of the field name that are read.
func (r *reader) values(name string) []string {
	vs := r.h.Values(name)
	var out []string
	for _, v := range vs[:min(len(vs), maxLines)] {
		if len(v) <= maxLine {
			out = append(out, v)
		}
	}
	return out
}

// emit adds l, read from the lines header describes, under the rules
// every limit keeps: Remaining at most a known Limit, and nothing left
// waits at least until the next whole second of now.
func (r *reader) emit(l Limit, header string) {
	if l.Limit > 0 && l.Remaining > l.Limit {
		l.Remaining = l.Limit
	}
	if l.Remaining == 0 && l.Reset < time.Second {
		next := r.now.Truncate(time.Second).Add(time.Second)
		l.Reset = max(l.Reset, next.Sub(r.now))
	}
	l.Header = header
	r.out = append(r.out, l)
}

// lines describes, for Limit.Header, the lines of the named fields that
// are read, and the Date line when abs (an absolute time was placed on
// it).
func (r *reader) lines(abs bool, names ...string) string {
	var b strings.Builder
	for _, n := range names {
		if vs := r.values(n); len(vs) > 0 {
			line(&b, n, vs...)
		}
	}
	if abs && r.date != "" {
		line(&b, "Date", r.date)
	}
	return b.String()
}

// line appends "name: values" to b, values joined by ", " and cut to
// headerValueMax bytes on a rune boundary.
func line(b *strings.Builder, name string, values ...string) {
	if b.Len() > 0 {
		b.WriteString("; ")
	}
	b.WriteString(name)
	b.WriteString(": ")
	var v strings.Builder
	for i, s := range values {
		if i > 0 {
			v.WriteString(", ")
		}
		v.WriteString(s)
		if v.Len() > headerValueMax {
			break
		}
	}
	s := v.String()
	if len(s) > headerValueMax {
		i := headerValueMax
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		s = s[:i] + "…"
	}
	b.WriteString(s)
}
