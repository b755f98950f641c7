package fairindex

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/shaper-io/shaper/internal/field"
	"github.com/shaper-io/shaper/internal/sizing"
	"github.com/shaper-io/shaper/limiters"
)

// Check reports the first field of f out of range on a downstream at
// rate, named under the fair share ("key_rate", "KeyRate"), or nil. It is
// the one rule for a fair share: shaping's Dispatcher.Add applies it to
// the Go value, internal/config to the file (naming Field under the
// downstream's fairness).
func (f *Fairness) Check(rate limiters.Limit) *field.Problem {
	if f.DefaultWeight < 0 || f.DefaultWeight > MaxWeight || math.IsNaN(f.DefaultWeight) {
		return field.Errorf("default_weight", "DefaultWeight", "must be in (0, %g], got %g", float64(MaxWeight), f.DefaultWeight)
	}
	for _, k := range slices.Sorted(maps.Keys(f.Weights)) {
		if w := f.Weights[k]; !(w > 0 && w <= MaxWeight) {
			return field.Errorf(fmt.Sprintf("weights[%q]", k), fmt.Sprintf("Weights[%q]", k), "must be in (0, %g], got %g", float64(MaxWeight), w)
		}
	}
	if f.KeyRate.Rate != 0 {
		if msg := keyRateMsg(f.KeyRate, rate); msg != "" {
			return field.Errorf("key_rate", "KeyRate", "%s", msg)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(f.KeyRates)) {
		if msg := keyRateMsg(f.KeyRates[k], rate); msg != "" {
			return field.Errorf(fmt.Sprintf("key_rates[%q]", k), fmt.Sprintf("KeyRates[%q]", k), "%s", msg)
		}
	}
	return nil
}

// CheckKeyRate reports why l cannot be a key's ceiling on a downstream at
// rate (in the file, or a runtime one: shaper ctl key RATE): an invalid
// rate, one above the downstream's (it would never bind), or one slower
// than a task per sizing.MaxInterval. Errors wrap limiters.ErrInvalidLimit.
func CheckKeyRate(l, rate limiters.Limit) error {
	if msg := keyRateMsg(l, rate); msg != "" {
		return fmt.Errorf("%w: key rate %s", limiters.ErrInvalidLimit, msg)
	}
	return nil
}

// keyRateMsg says what is wrong with l as a key's ceiling under rate, or "".
func keyRateMsg(l, rate limiters.Limit) string {
	if err := sizing.ValidateRate(l); err != nil {
		return strings.TrimPrefix(err.Error(), limiters.ErrInvalidLimit.Error()+": ")
	}
	if l.PerSec() > rate.PerSec() {
		return fmt.Sprintf("%q is above the downstream's rate %q: it would never bind", l.RateString(), rate.RateString())
	}
	if sizing.CheckRate(l, 1) != nil {
		return fmt.Sprintf("%q is slower than one task per key in %s", l.RateString(), sizing.MaxInterval)
	}
	return ""
}
