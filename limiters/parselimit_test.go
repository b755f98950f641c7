package limiters_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/shaper-io/shaper/limiters"
)

// One wording for every bad rate: `invalid rate "…": why`, after the
// package's prefix, with no Go field name in it.
func TestParseLimitMessages(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"fast", `invalid rate "fast" (want <number>/<unit>, e.g. 50/s)`},
		{"5/fortnight", `invalid rate "5/fortnight": unknown period "fortnight" (use s, m, h, d or a duration like 500ms)`},
		{"1e309/s", `invalid rate "1e309/s": exponents are not supported (write the count out, e.g. 1000/s)`},
		{"1E3/s", `invalid rate "1E3/s": exponents are not supported`},
		{"0/s", `invalid rate "0/s": the count must be a positive number, got "0"`},
		{"0", `invalid rate "0": a rate must be positive, got "0"`},
		{"-3", `invalid rate "-3": a rate must be positive, got "-3"`},
		{"1e3", `invalid rate "1e3": exponents are not supported`},
		{"1/1x", `invalid rate "1/1x": unknown period "1x"`},
		{"1/-1d", `invalid rate "1/-1d": unknown period "-1d"`},
		{"abc/m", `invalid rate "abc/m": the count must be a positive number, got "abc"`},
		{"1.1234567/s", `invalid rate "1.1234567/s": at most 6 decimals`},
		{"1/100ns", `invalid rate "1/100ns": the period must be at least 1µs, got 100ns`},
		{"9000000000000000000/s", `invalid rate "9000000000000000000/s": out of range`},
	} {
		_, err := limiters.ParseLimit(c.in)
		if !errors.Is(err, limiters.ErrInvalidLimit) {
			t.Errorf("ParseLimit(%q): err = %v, want ErrInvalidLimit", c.in, err)
			continue
		}
		msg := strings.TrimPrefix(err.Error(), limiters.ErrInvalidLimit.Error()+": ")
		if !strings.HasPrefix(msg, c.want) {
			t.Errorf("ParseLimit(%q): %q, want it to start with %q", c.in, msg, c.want)
		}
		for _, goName := range []string{"Rate ", "Period ", "Burst "} {
			if strings.Contains(msg, goName) {
				t.Errorf("ParseLimit(%q): %q names the Go field %q", c.in, msg, goName)
			}
		}
	}
}
