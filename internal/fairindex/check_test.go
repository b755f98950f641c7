package fairindex

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/testutil"
	"github.com/shaper-io/shaper/limiters"
)

// TestCheck: the one rule for a fair share names the first field out of
// range in the file's words and in Go's, with the value.
func TestCheck(t *testing.T) {
	rate := limiters.PerSecond(5)
	day := limiters.Limit{Rate: 1, Period: 25 * time.Hour}
	cases := []struct {
		name             string
		f                Fairness
		field, goF, want string
	}{
		{"fine", Fairness{Weights: map[string]float64{"a": 2}, DefaultWeight: 0.5, KeyRate: limiters.PerSecond(1),
			KeyRates: map[string]limiters.Limit{"vip": rate}}, "", "", ""},
		{"default weight NaN", Fairness{DefaultWeight: math.NaN()}, "default_weight", "DefaultWeight", "got NaN"},
		{"default weight too big", Fairness{DefaultWeight: 2e6}, "default_weight", "DefaultWeight", "must be in (0, 1e+06], got 2e+06"},
		{"weight zero", Fairness{Weights: map[string]float64{"b": 1, "a": 0}}, `weights["a"]`, `Weights["a"]`, "got 0"},
		{"key rate above", Fairness{KeyRate: limiters.PerSecond(10)}, "key_rate", "KeyRate", `"10/s" is above the downstream's rate "5/s"`},
		{"key rate too slow", Fairness{KeyRate: day}, "key_rate", "KeyRate", `"1/25h" is slower than one task per key in 24h0m0s`},
		{"key rates above", Fairness{KeyRates: map[string]limiters.Limit{"vip": limiters.PerSecond(6)}}, `key_rates["vip"]`, `KeyRates["vip"]`, "never bind"},
		{"key rate invalid", Fairness{KeyRate: limiters.Limit{Rate: 1, Period: time.Nanosecond}}, "key_rate", "KeyRate", "Period"},
	}
	for _, c := range cases {
		testutil.WantProblem(t, c.name, c.f.Check(rate), c.field, c.goF, c.want)
	}
	if err := CheckKeyRate(limiters.PerSecond(10), rate); !errors.Is(err, limiters.ErrInvalidLimit) || !strings.Contains(err.Error(), "never bind") {
		t.Errorf("CheckKeyRate above the rate: %v, want ErrInvalidLimit, never bind", err)
	}
	if err := CheckKeyRate(limiters.PerSecond(5), rate); err != nil {
		t.Errorf("CheckKeyRate at the rate: %v", err)
	}
}
