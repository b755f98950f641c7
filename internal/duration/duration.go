// Package duration reads a duration the way every shaper setting writes
// one: a Go duration ("500ms", "2s", "1m30s", "1h") optionally with a
// count of days first ("1d", "7d", "1.5d", "1d12h"). A day is 24h, as in a
// rate's "/d". The config file's durations, a rate's period
// (limiters.ParseLimit's "1/1d") and a task's in, ttl and timeout all read
// them with Parse.
package duration

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Day is the length of the unit "d": 24 hours, whatever the calendar.
const Day = 24 * time.Hour

// ErrInvalid is wrapped by every error of Parse.
var ErrInvalid = errors.New("invalid duration")

var reDays = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)

// Parse reads s: time.ParseDuration's syntax, or a non-negative count of
// days before "d" followed by an optional non-negative Go duration. No
// space is trimmed. The error reads `invalid duration "s"` and wraps
// ErrInvalid.
func Parse(s string) (time.Duration, error) {
	bad := fmt.Errorf("%w %q", ErrInvalid, s)
	days, rest, ok := strings.Cut(s, "d") // no unit of Go's has a d
	if !ok {
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, bad
		}
		return d, nil
	}
	n, err := strconv.ParseFloat(days, 64)
	if err != nil || !reDays.MatchString(days) || n*float64(Day) > math.MaxInt64 {
		return 0, bad
	}
	v := time.Duration(n * float64(Day))
	if rest == "" {
		return v, nil
	}
	r, err := time.ParseDuration(rest)
	if err != nil || r < 0 || strings.HasPrefix(rest, "+") || v > math.MaxInt64-r {
		return 0, bad
	}
	return v + r, nil
}
