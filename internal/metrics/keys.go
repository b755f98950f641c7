package metrics

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// KeyLabel is the label that carries a tenant key (an admission or
// fairness key, which can be sensitive). The HTTP server serves a series
// labelled with it on /metrics only when http.metrics_keys is set, and
// then only to a request with the bearer token when one is configured
// (WithoutKeys gives the rest).
const KeyLabel = "key"

// SafeKey is k as it may be shown: on a page, in JSON, in a log line or
// as a label value. Every control character (C0, DEL, C1), Unicode format
// character (the bidi controls U+200E, U+200F, U+061C, U+202A–U+202E and
// U+2066–U+2069 among them, and zero-width characters), and the line and
// paragraph separators U+2028 and U+2029 is written as \uXXXX (\UXXXXXXXX
// above U+FFFF), and each byte of invalid UTF-8 as \xNN; the rest is
// unchanged, so a key cannot reorder, hide or break the text around it.
// The result is valid UTF-8 and SafeKey(SafeKey(k)) == SafeKey(k): a key
// escaped once (a metric label) is shown the same when escaped again.
func SafeKey(k string) string {
	i := strings.IndexFunc(k, unsafeRune)
	if i < 0 && utf8.ValidString(k) {
		return k
	}
	var b strings.Builder
	b.Grow(len(k) + 8)
	for len(k) > 0 {
		r, n := utf8.DecodeRuneInString(k)
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, k[0])
		case unsafeRune(r) && r > 0xFFFF:
			fmt.Fprintf(&b, `\U%08x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(k[:n])
		}
		k = k[n:]
	}
	return b.String()
}

// unsafeRune reports whether r is escaped by SafeKey.
func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}

// WithoutKeys is g without the series labelled with KeyLabel (an empty
// value is no label, as in Prometheus); a family left with no series is
// left out.
func WithoutKeys(g prometheus.Gatherer) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := g.Gather()
		out := mfs[:0]
		for _, mf := range mfs {
			ms := mf.Metric[:0]
			for _, m := range mf.Metric {
				if !hasLabel(m, KeyLabel) {
					ms = append(ms, m)
				}
			}
			if len(ms) == 0 && len(mf.Metric) > 0 {
				continue
			}
			mf.Metric = ms
			out = append(out, mf)
		}
		return out, err
	})
}

func hasLabel(m *dto.Metric, name string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() != "" {
			return true
		}
	}
	return false
}
