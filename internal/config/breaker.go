package config

import (
	"time"

	"github.com/shaper-io/shaper/internal/breakerspec"
)

// Breaker is a downstream's circuit breaker (shaping.Breaker): when the
// share of calls that fail the way an outage does (5xx, timeouts,
// connection failures; not 4xx, not 429) reaches ErrorRatio over Window,
// with at least MinCalls calls, nothing is released for Cooldown; then
// probes go at ProbeRate, Probes successes close it and a failure reopens
// it for twice as long, at most MaxCooldown. Every field has a default
// (internal/breakerspec), so "breaker: {}" turns it on.
type Breaker struct {
	// ErrorRatio, in (0, 1]. Default 0.5.
	ErrorRatio float64 `yaml:"error_ratio,omitempty"`
	// Window is the sliding window, 1s-1h and at least one interval of
	// the rate. Default 10s.
	Window Duration `yaml:"window,omitempty"`
	// MinCalls is the fewest calls in the window for the ratio to count;
	// at most what the rate releases in the window. Default 20.
	MinCalls int `yaml:"min_calls,omitempty"`
	// Cooldown is the first opening's length, at least 100ms. Default 5s.
	Cooldown Duration `yaml:"cooldown,omitempty"`
	// MaxCooldown caps the doubling cool-down, at most 24h. Default 2m
	// (or Cooldown, when that is longer).
	MaxCooldown Duration `yaml:"max_cooldown,omitempty"`
	// ProbeRate paces half-open probes across every process; at most the
	// downstream's rate. Default 1/s.
	ProbeRate Rate `yaml:"probe_rate,omitempty"`
	// Probes is how many probes must succeed to close it, 1-1000.
	// Default 3.
	Probes int `yaml:"probes,omitempty"`
}

// Spec is the breaker's thresholds as internal/breakerspec checks them.
func (b Breaker) Spec() breakerspec.Spec {
	return breakerspec.Spec{ErrorRatio: b.ErrorRatio, Window: time.Duration(b.Window), MinCalls: b.MinCalls,
		Cooldown: time.Duration(b.Cooldown), MaxCooldown: time.Duration(b.MaxCooldown), ProbeRate: b.ProbeRate.Limit(),
		Probes: b.Probes}
}

// fillBreaker sets the defaults of the breaker's fields the file leaves
// out; a field written as 0 keeps it, for validation to report.
func (d *Downstream) fillBreaker(p string, set func(string) bool) {
	b := d.Breaker
	if b == nil {
		return
	}
	p += ".breaker."
	def := breakerspec.Spec{Cooldown: time.Duration(b.Cooldown)}.Filled() // max_cooldown's default follows cooldown
	if !set(p + "error_ratio") {
		b.ErrorRatio = def.ErrorRatio
	}
	if !set(p + "window") {
		b.Window = Duration(def.Window)
	}
	if !set(p + "min_calls") {
		b.MinCalls = def.MinCalls
	}
	if !set(p + "cooldown") {
		b.Cooldown = Duration(def.Cooldown)
	}
	if !set(p + "max_cooldown") {
		b.MaxCooldown = Duration(def.MaxCooldown)
	}
	if !set(p + "probe_rate") {
		b.ProbeRate = RateOf(def.ProbeRate)
	}
	if !set(p + "probes") {
		b.Probes = def.Probes
	}
}

// validateBreaker reports the first breaker threshold that is out of
// range or contradicts another or the downstream's rate.
func (d *Downstream) validateBreaker(p string) *Error {
	b := d.Breaker
	if b == nil {
		return nil
	}
	p += ".breaker"
	if e := checkRate(p+".probe_rate", b.ProbeRate); e != nil {
		return e
	}
	if b.ProbeRate.IsZero() {
		return errf(p+".probe_rate", "required (e.g. 1/s)")
	}
	if pr := b.Spec().Check(d.Limit()); pr != nil {
		return errf(p+"."+pr.Field, "%s", pr.Msg)
	}
	return nil
}
