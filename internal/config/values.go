package config

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/shaper-io/shaper/internal/duration"
	"github.com/shaper-io/shaper/limiters"
)

// Duration is a time.Duration written as package duration reads it:
// "2s", "500ms" or "1m30s", or with days first: "1d", "7d", "1d12h" (a day
// is 24h, as in rates). Convert with time.Duration(d).
type Duration time.Duration

// String formats d like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML parses a duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := duration.Parse(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		return nodeError(n, "invalid duration %s (want a number with a unit, e.g. 2s, 500ms, 1m30s or 1d)", q(n.Value))
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes d as a duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// Rate is a rate written as limiters.ParseLimit reads it, e.g. "50/s" or
// "3000/m", parsed once when the file is read. The zero Rate is a rate
// left out. A Rate that does not parse keeps its text and the parse
// error, which Validate reports at the field's path; its Limit is zero.
type Rate struct {
	text  string
	limit limiters.Limit
	err   error
}

// ParseRate parses s. The Rate it returns holds s even when s does not
// parse, so that a Config built in code reports it as a file would.
func ParseRate(s string) (Rate, error) {
	l, err := limiters.ParseLimit(s)
	if err != nil {
		return Rate{text: s, err: err}, err
	}
	return Rate{text: s, limit: l}, nil
}

// RateOf is l as a Rate, written as l.RateString() writes it.
func RateOf(l limiters.Limit) Rate { return Rate{text: l.RateString(), limit: l} }

// MustRate is ParseRate for rates known to be valid; it panics on an
// invalid one.
func MustRate(s string) Rate {
	r, err := ParseRate(s)
	if err != nil {
		panic(err)
	}
	return r
}

// Limit is the parsed rate, with the burst ParseLimit gives it (the rate's
// count); the zero Limit when r is left out or does not parse.
func (r Rate) Limit() limiters.Limit { return r.limit }

// String is the rate as written.
func (r Rate) String() string { return r.text }

// IsZero reports whether the rate was left out.
func (r Rate) IsZero() bool { return r.text == "" }

// UnmarshalYAML parses a rate. An invalid rate is kept with its error for
// Validate, which names the field; only a value that is not a scalar is a
// decoding error, worded as the decoder words it for a string.
func (r *Rate) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return nodeError(n, "cannot unmarshal %s into string", n.ShortTag())
	}
	*r, _ = ParseRate(n.Value)
	return nil
}

// MarshalYAML writes r as written.
func (r Rate) MarshalYAML() (any, error) { return r.text, nil }

// MarshalText writes r as written (for JSON and logs).
func (r Rate) MarshalText() ([]byte, error) { return []byte(r.text), nil }

// ByteSize is a size in bytes, written as a plain number of bytes or with
// a unit: B, KiB (1024) or MiB (1024²), e.g. "1MiB" or 65536.
type ByteSize int64

type sizeUnit struct {
	name string
	mult int64
}

var sizeUnits = []sizeUnit{{"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

// String formats s with the largest unit that divides it, e.g. "1MiB".
func (s ByteSize) String() string {
	for _, u := range sizeUnits {
		if s != 0 && int64(s)%u.mult == 0 {
			return strconv.FormatInt(int64(s)/u.mult, 10) + u.name
		}
	}
	return strconv.FormatInt(int64(s), 10) + "B"
}

// UnmarshalYAML parses a size.
func (s *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	v, ok := parseSize(n.Value)
	if n.Kind != yaml.ScalarNode || !ok {
		return nodeError(n, "invalid size %s (want bytes, or a whole number with B, KiB or MiB, e.g. 1MiB)", q(n.Value))
	}
	*s = ByteSize(v)
	return nil
}

// MarshalYAML writes s as a size string.
func (s ByteSize) MarshalYAML() (any, error) { return s.String(), nil }

func parseSize(str string) (int64, bool) {
	str = strings.TrimSpace(str)
	end := strings.IndexFunc(str, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(str)
	}
	num, unit := str[:end], strings.TrimSpace(str[end:])
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, false
	}
	mult := int64(1)
	if unit != "" {
		i := slices.IndexFunc(sizeUnits, func(u sizeUnit) bool { return u.name == unit })
		if i < 0 {
			return 0, false
		}
		mult = sizeUnits[i].mult
	}
	if v > math.MaxInt64/mult {
		return 0, false
	}
	return v * mult, true
}

// nodeError is an error from an UnmarshalYAML method, as a *yaml.TypeError
// so that the decoder collects it in document order with its own errors.
func nodeError(n *yaml.Node, format string, args ...any) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: ", n.Line) + fmt.Sprintf(format, args...)}}
}
