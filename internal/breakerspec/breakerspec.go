// Package breakerspec holds a circuit breaker's thresholds, their
// defaults and the rules that make them agree with each other and with the
// downstream's rate. The dispatcher (shaping.Breaker) and the config's
// validation (internal/config) both apply them; they live here, below
// both, so that checking a file does not import the dispatcher (as
// internal/sizing does for the bucket's sizing rules).
//
// Limiting and breaking are a pair: the rate protects the downstream from
// us, the breaker protects us while it is down. Their thresholds must not
// contradict each other: a breaker that needs more calls in its window than
// the rate lets through can never open, and probes paced faster than the
// rate are not a low pace.
package breakerspec

import (
	"fmt"
	"github.com/shaper-io/shaper/internal/field"
	"math"
	"strings"
	"time"

	"github.com/shaper-io/shaper/limiters"
)

// Defaults for thresholds left zero.
const (
	DefaultErrorRatio  = 0.5
	DefaultWindow      = 10 * time.Second
	DefaultMinCalls    = 20
	DefaultCooldown    = 5 * time.Second
	DefaultMaxCooldown = 2 * time.Minute
	DefaultProbes      = 3
)

// DefaultProbeRate is the pace of half-open probes when none is given:
// one a second.
var DefaultProbeRate = limiters.Limit{Rate: 1, Period: time.Second, Burst: 1}

// Bounds past which a value is a mistake (a unit typed wrong), not a
// configuration.
const (
	MinWindow       = time.Second
	MaxWindow       = time.Hour
	MinCooldown     = 100 * time.Millisecond
	MaxMaxCooldown  = 24 * time.Hour
	MaxProbes       = 1000
	MaxMinCalls     = 1000000
	ratioResolution = 1e6 // the script compares ratios in parts per million
)

// Buckets is how many buckets the script splits the window into: the
// window slides by a tenth of itself.
const Buckets = 10

// Spec is a breaker's thresholds (shaping.Breaker is this type). A zero
// field means its default (Filled).
type Spec struct {
	// ErrorRatio opens the breaker when outage errors / calls in the
	// window reach it, in (0, 1].
	ErrorRatio float64
	// Window is the sliding window of outcomes (1s-1h, at least one
	// interval of the rate); it slides by a tenth of itself.
	Window time.Duration
	// MinCalls is the fewest calls in the window for the ratio to count;
	// at most what the rate releases in the window.
	MinCalls int
	// Cooldown is how long the breaker stays open the first time (at
	// least 100ms).
	Cooldown time.Duration
	// MaxCooldown caps the cool-down, which doubles on each failed probe
	// (at least Cooldown, at most 24h).
	MaxCooldown time.Duration
	// ProbeRate paces half-open probes across every process; at most the
	// rate. Only Rate and Period are read.
	ProbeRate limiters.Limit
	// Probes is how many probes must succeed to close the breaker (1-1000).
	Probes int
}

// Filled is s with every zero field set to its default.
func (s Spec) Filled() Spec {
	if s.ErrorRatio == 0 {
		s.ErrorRatio = DefaultErrorRatio
	}
	if s.Window == 0 {
		s.Window = DefaultWindow
	}
	if s.MinCalls == 0 {
		s.MinCalls = DefaultMinCalls
	}
	if s.Cooldown == 0 {
		s.Cooldown = DefaultCooldown
	}
	if s.MaxCooldown == 0 {
		s.MaxCooldown = max(DefaultMaxCooldown, s.Cooldown)
	}
	if s.ProbeRate.IsZero() {
		s.ProbeRate = DefaultProbeRate
	}
	if s.Probes == 0 {
		s.Probes = DefaultProbes
	}
	return s
}

// Problem is the first threshold that is out of range or contradicts
// another or the rate, named under the breaker ("probe_rate",
// "ProbeRate").
type Problem = field.Problem

var problem = field.Errorf

// Check reports the first problem of s (as Filled returns it) on a
// downstream released at rate; nil when the thresholds agree.
func (s Spec) Check(rate limiters.Limit) *Problem {
	switch {
	case !(s.ErrorRatio > 0 && s.ErrorRatio <= 1) || math.IsNaN(s.ErrorRatio):
		return problem("error_ratio", "ErrorRatio", "must be in (0, 1], got %v", s.ErrorRatio)
	case s.ErrorRatio*ratioResolution < 1:
		return problem("error_ratio", "ErrorRatio", "%v is below the resolution of one part per million", s.ErrorRatio)
	case s.Window < MinWindow || s.Window > MaxWindow:
		return problem("window", "Window", "must be %s to %s, got %s", Short(MinWindow), Short(MaxWindow), Short(s.Window))
	case s.Window < rate.Interval(1):
		return problem("window", "Window", "%s is shorter than one interval of the rate %s (%s): the window could never hold two calls",
			Short(s.Window), rate.RateString(), Short(rate.Interval(1)))
	case s.MinCalls < 1 || s.MinCalls > MaxMinCalls:
		return problem("min_calls", "MinCalls", "must be 1-%d, got %d", MaxMinCalls, s.MinCalls)
	case int64(s.MinCalls) > rate.UnitsIn(s.Window):
		return problem("min_calls", "MinCalls", "%d can never be reached: the rate %s releases at most %d calls in the window %s, so the breaker could never open",
			s.MinCalls, rate.RateString(), rate.UnitsIn(s.Window), Short(s.Window))
	case s.Cooldown < MinCooldown:
		return problem("cooldown", "Cooldown", "must be at least %s, got %s", Short(MinCooldown), Short(s.Cooldown))
	case s.MaxCooldown < s.Cooldown:
		return problem("max_cooldown", "MaxCooldown", "%s is below the cooldown %s", Short(s.MaxCooldown), Short(s.Cooldown))
	case s.MaxCooldown > MaxMaxCooldown:
		return problem("max_cooldown", "MaxCooldown", "must be at most %s, got %s", Short(MaxMaxCooldown), Short(s.MaxCooldown))
	}
	if err := (limiters.Limit{Rate: s.ProbeRate.Rate, Period: s.ProbeRate.Period}).Validate(); err != nil {
		return problem("probe_rate", "ProbeRate", "%v", err)
	}
	switch {
	case s.ProbeRate.PerSec() > rate.PerSec():
		return problem("probe_rate", "ProbeRate", "%s is above the rate %s: probes would go faster than the downstream's own limit",
			s.ProbeRate.RateString(), rate.RateString())
	case s.ProbeRate.Interval(1) > s.MaxCooldown:
		return problem("probe_rate", "ProbeRate", "%s spaces probes by %s, longer than the max_cooldown %s",
			s.ProbeRate.RateString(), Short(s.ProbeRate.Interval(1)), Short(s.MaxCooldown))
	case s.Probes < 1 || s.Probes > MaxProbes:
		return problem("probes", "Probes", "must be 1-%d, got %d", MaxProbes, s.Probes)
	}
	return nil
}

// String reads like "opens at 0.5 of ≥20 calls in 10s; open 5s doubling
// to 2m; closes after 3 probes at 1/s", defaults filled in.
func (s Spec) String() string {
	f := s.Filled()
	return fmt.Sprintf("opens at %v of ≥%d calls in %s; open %s doubling to %s; closes after %d probes at %s",
		f.ErrorRatio, f.MinCalls, Short(f.Window), Short(f.Cooldown), Short(f.MaxCooldown), f.Probes, f.ProbeRate.RateString())
}

// RatioPPM is ErrorRatio in parts per million, as the script compares it.
func (s Spec) RatioPPM() int64 { return int64(math.Round(s.ErrorRatio * ratioResolution)) }

// Short writes d as time.Duration does, without zero minutes or seconds
// after a larger unit ("1h", "2m", "1m30s").
func Short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
