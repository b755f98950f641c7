package duration_test

import (
	"errors"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/duration"
)

func TestParse(t *testing.T) {
	t.Parallel()
	const day = 24 * time.Hour
	for i, tt := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"500ms", 500 * time.Millisecond, true},
		{"2s", 2 * time.Second, true},
		{"1m30s", 90 * time.Second, true},
		{"-1s", -time.Second, true}, // callers refuse it where it must be positive
		{"1d", day, true},
		{"7d", 7 * day, true},
		{"1.5d", 36 * time.Hour, true},
		{"1d12h", 36 * time.Hour, true},
		{"2d30m", 2*day + 30*time.Minute, true},
		{"0d", 0, true},
		{"d", 0, false},
		{"-1d", 0, false},
		{"1d-1h", 0, false},
		{"1d+1h", 0, false},
		{"1.d", 0, false},
		{"1e3d", 0, false},
		{"1dd", 0, false},
		{"1day", 0, false},
		{"200000d", 0, false}, // past 292 years
		{"2", 0, false},
		{"soon", 0, false},
		{"", 0, false},
		{" 2s", 0, false},
	} {
		got, err := duration.Parse(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("step %d: Parse(%q) = %v, %v; want %v, ok %v", i, tt.in, got, err, tt.want, tt.ok)
		}
		if err != nil && (!errors.Is(err, duration.ErrInvalid) || err.Error() != `invalid duration "`+tt.in+`"`) {
			t.Errorf("step %d: Parse(%q) error %q, want `invalid duration %q` wrapping ErrInvalid", i, tt.in, err, tt.in)
		}
	}
}
