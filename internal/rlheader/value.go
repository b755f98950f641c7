package rlheader

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/shaper-io/shaper/internal/sizing"
)

// Unix times from these on are not delay seconds (31 years): seconds from
// 1e9 (2001), milliseconds from 1e12.
const (
	epochSeconds = 1e9
	epochMillis  = 1e12
)

// maxNumber is the longest number read, in bytes: a few hundred digits
// are a number (huge, so bounded), a longer value is not read.
const maxNumber = 1024

// maxTime is the longest date or time read, in bytes.
const maxTime = 64

// form is how a field writes a time.
type form int

const (
	// formAuto: delay seconds, or a Unix time in seconds or milliseconds
	// told apart by size, an RFC 3339 time, an HTTP date.
	formAuto    form = iota
	formDelay        // delay seconds or an HTTP date (Retry-After)
	formS            // delay seconds
	formMS           // delay milliseconds
	formEpochS       // a Unix time in seconds
	formEpochMS      // a Unix time in milliseconds
	formISO          // an RFC 3339 (ISO 8601) time with its zone
)

// number reads a decimal number ([+-]digits[.digits][e[+-]digits]); one
// beyond float64's range is ±math.MaxFloat64, one too small for it 0.
// Anything else (NaN, Inf, hexadecimal, words, more than maxNumber bytes)
// is not a number.
func number(v string) (float64, bool) {
	v = strings.TrimSpace(v)
	if len(v) > maxNumber || !decimal(v) {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	if math.IsInf(f, 0) {
		f = math.Copysign(math.MaxFloat64, f)
	}
	return f, true
}

// decimal reports whether v is [+-]digits[.digits][e[+-]digits], with at
// least one digit before the exponent.
func decimal(v string) bool {
	i := 0
	if i < len(v) && (v[i] == '+' || v[i] == '-') {
		i++
	}
	n := digits(v[i:])
	i += n
	if i < len(v) && v[i] == '.' {
		f := digits(v[i+1:])
		i, n = i+1+f, n+f
	}
	if n == 0 {
		return false
	}
	if i < len(v) && (v[i] == 'e' || v[i] == 'E') {
		i++
		if i < len(v) && (v[i] == '+' || v[i] == '-') {
			i++
		}
		e := digits(v[i:])
		if e == 0 {
			return false
		}
		i += e
	}
	return i == len(v)
}

// digits is the length of v's leading run of ASCII digits.
func digits(v string) int {
	i := 0
	for i < len(v) && v[i] >= '0' && v[i] <= '9' {
		i++
	}
	return i
}

// bound turns seconds into a Duration in [0, sizing.MaxInterval], rounded
// up to the microsecond.
func bound(f float64) time.Duration {
	if !(f > 0) {
		return 0
	}
	f = min(f, sizing.MaxInterval.Seconds())
	return time.Duration(math.Ceil(f*1e6)) * time.Microsecond
}

// toUnits turns a number into units: negative is 0, huge is MaxUnits, a
// fraction is rounded down.
func toUnits(f float64) int64 {
	return int64(min(max(f, 0), MaxUnits))
}

// tokens splits a field's lines into their list members (at commas
// outside quoted strings), an HTTP date's comma kept inside its member.
func tokens(lines []string) []string {
	var out []string
	for _, l := range lines {
		ms := members(l)
		for i := 0; i < len(ms); i++ {
			if i+1 < len(ms) && len(ms[i]) <= 9 && len(ms[i+1]) <= maxTime && digits(ms[i]) == 0 {
				if d := ms[i] + ", " + ms[i+1]; httpTime(d) {
					out = append(out, d)
					i++
					continue
				}
			}
			out = append(out, ms[i])
		}
	}
	return out
}

// httpTime reports whether v is an HTTP date.
func httpTime(v string) bool {
	_, err := http.ParseTime(v)
	return err == nil
}

// fewest reads a count of units from a field's lines: the fewest of their
// members (the strictest), each as toUnits rounds it.
func fewest(lines []string) (int64, bool) {
	var n int64
	ok := false
	for _, t := range tokens(lines) {
		bare, _, _ := item(t)
		if f, good := number(bare); good && (!ok || toUnits(f) < n) {
			n, ok = toUnits(f), true
		}
	}
	return n, ok
}

// quota reads a limit field: the smallest of its plain members, or of all
// its members when none is plain (a member with parameters, 10;w=1, is a
// policy, not a limit of its own).
func quota(lines []string) (int64, bool) {
	var plain, every int64
	okPlain, okEvery := false, false
	for _, t := range tokens(lines) {
		bare, params, _ := item(t)
		f, ok := number(bare)
		if !ok {
			continue
		}
		n := toUnits(f)
		if !okEvery || n < every {
			every, okEvery = n, true
		}
		if len(params) == 0 && (!okPlain || n < plain) {
			plain, okPlain = n, true
		}
	}
	if okPlain {
		return plain, true
	}
	return every, okEvery
}

// longest reads a time from a field's lines in form f: the longest of
// their members (the strictest). abs reports that it was an absolute time,
// placed on r.base.
func (r *reader) longest(lines []string, f form) (d time.Duration, abs, ok bool) {
	for _, t := range tokens(lines) {
		if e, a, good := r.when(t, f); good && (!ok || e > d) {
			d, abs, ok = e, a, true
		}
	}
	return d, abs, ok
}

// when reads one time in form f as a delay from now (an absolute time
// from r.base); abs reports that it was absolute.
func (r *reader) when(v string, f form) (d time.Duration, abs, ok bool) {
	bare, _, _ := item(v)
	if n, isNum := number(bare); isNum {
		switch f {
		case formAuto:
			switch {
			case n >= epochMillis:
				return r.since(n / 1000), true, true
			case n >= epochSeconds:
				return r.since(n), true, true
			}
			return bound(n), false, true
		case formDelay, formS:
			return bound(n), false, true
		case formMS:
			return bound(n / 1000), false, true
		case formEpochS:
			return r.since(n), true, true
		case formEpochMS:
			return r.since(n / 1000), true, true
		}
		return 0, false, false
	}
	v = bare
	if len(v) > maxTime {
		return 0, false, false
	}
	var t time.Time
	var err error
	switch f {
	case formAuto:
		if t, ok = isoTime(v); !ok {
			t, err = http.ParseTime(v)
			ok = err == nil
		}
	case formDelay:
		t, err = http.ParseTime(v)
		ok = err == nil
	case formISO:
		t, ok = isoTime(v)
	}
	if !ok {
		return 0, false, false
	}
	return bound(t.Sub(r.base).Seconds()), true, true
}

// since is the delay from r.base to a Unix time in seconds.
func (r *reader) since(unix float64) time.Duration {
	return bound(unix - float64(r.base.UnixNano())/1e9)
}

// isoLayouts are the ISO 8601 times read: RFC 3339 (fractional seconds
// too), without seconds (Atlassian's 2026-03-26T16:00Z), and with a
// +0000 zone. Each names its zone: a time without one is ambiguous.
var isoLayouts = []string{time.RFC3339, "2006-01-02T15:04Z07:00", "2006-01-02T15:04:05Z0700"}

// isoTime reads an ISO 8601 time with its zone.
func isoTime(v string) (time.Time, bool) {
	for _, l := range isoLayouts {
		if t, err := time.Parse(l, v); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// toBoundary is the time from t to the next multiple of w since the Unix
// epoch, in (0, w].
func toBoundary(t time.Time, w time.Duration) time.Duration {
	into := time.Duration(t.UnixNano() % int64(w))
	if into < 0 {
		into += w
	}
	return w - into
}
