package cliflags

import (
	"testing"
	"time"

	"github.com/shaper-io/shaper/limiters"
)

func TestParseRate(t *testing.T) {
	t.Parallel()
	for i, tt := range []struct {
		in      string
		want    limiters.Limit
		wantErr string
	}{
		{"20", limiters.PerSecond(20), ""},
		{" 20 ", limiters.PerSecond(20), ""},
		{"2.5", limiters.Limit{Rate: 5, Period: 2 * time.Second, Burst: 5}, ""},
		{"20/s", limiters.PerSecond(20), ""},
		{"3000/m", limiters.PerMinute(3000), ""},
		{"1/1d", limiters.Limit{Rate: 1, Period: 24 * time.Hour, Burst: 1}, ""},
		{"0", limiters.Limit{}, `rate must be positive, got "0"`},
		{"-3", limiters.Limit{}, `rate must be positive, got "-3"`},
		{"fast", limiters.Limit{}, `invalid rate "fast" (want <number>/<unit>, e.g. 50/s)`},
	} {
		got, err := ParseRate(tt.in)
		if tt.wantErr == "" && (err != nil || got != tt.want) || tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr) {
			t.Errorf("step %d: ParseRate(%q) = %v, %v; want %v, %q", i, tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}
