package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/breakerspec"
	"github.com/shaper-io/shaper/limiters"
)

func breakerDoc(rate, breaker string) string {
	return "downstreams:\n  - name: api\n    rate: " + rate + "\n    handler: {type: log}\n    breaker: " + breaker + "\n"
}

// "breaker: {}" turns the breaker on with every default; a long cooldown
// lifts the default max_cooldown to it; explicit values are kept.
func TestBreakerDefaults(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		doc  string
		want Breaker
	}{
		{breakerDoc("50/s", "{}"), Breaker{ErrorRatio: 0.5, Window: Duration(10 * time.Second), MinCalls: 20, Cooldown: Duration(5 * time.Second),
			MaxCooldown: Duration(2 * time.Minute), ProbeRate: RateOf(breakerspec.DefaultProbeRate), Probes: 3}},
		{breakerDoc("50/s", "{cooldown: 5m}"), Breaker{ErrorRatio: 0.5, Window: Duration(10 * time.Second), MinCalls: 20, Cooldown: Duration(5 * time.Minute),
			MaxCooldown: Duration(5 * time.Minute), ProbeRate: RateOf(breakerspec.DefaultProbeRate), Probes: 3}},
		{breakerDoc("50/s", "{error_ratio: 0.25, window: 30s, min_calls: 100, cooldown: 2s, max_cooldown: 1m, probe_rate: 2/s, probes: 5}"),
			Breaker{ErrorRatio: 0.25, Window: Duration(30 * time.Second), MinCalls: 100, Cooldown: Duration(2 * time.Second),
				MaxCooldown: Duration(time.Minute), ProbeRate: MustRate("2/s"), Probes: 5}},
	} {
		b := mustParse(t, tt.doc).Downstreams[0].Breaker
		if b == nil || *b != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.doc, b, tt.want)
		}
	}
	if b := mustParse(t, minimal).Downstreams[0].Breaker; b != nil {
		t.Errorf("no breaker in the file: got %+v, want nil", b)
	}
}

// Thresholds out of range, or that contradict each other or the rate, are
// errors that name the field and the value.
func TestBadBreakers(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		rate, breaker, field string
		want                 []string
	}{
		{"50/s", "{error_ratio: 0}", "error_ratio", []string{"must be in (0, 1], got 0"}},
		{"50/s", "{error_ratio: 1.5}", "error_ratio", []string{"got 1.5"}},
		{"50/s", "{window: 500ms}", "window", []string{"must be 1s to 1h, got 500ms"}},
		{"6/m", "{window: 5s, min_calls: 1}", "window", []string{"5s is shorter than one interval of the rate 6/m (10s)"}},
		{"5/s", "{window: 10s, min_calls: 100}", "min_calls", []string{"100 can never be reached", "at most 50 calls in the window 10s"}},
		{"50/s", "{min_calls: 0}", "min_calls", []string{"must be 1-1000000, got 0"}},
		{"50/s", "{cooldown: 10ms}", "cooldown", []string{"at least 100ms, got 10ms"}},
		{"50/s", "{cooldown: 5s, max_cooldown: 1s}", "max_cooldown", []string{"1s is below the cooldown 5s"}},
		{"5/s", "{probe_rate: 10/s}", "probe_rate", []string{"10/s is above the rate 5/s"}},
		{"50/s", "{probe_rate: 1/h}", "probe_rate", []string{"1/h spaces probes by 1h, longer than the max_cooldown 2m"}},
		{"50/s", "{probe_rate: often}", "probe_rate", []string{`invalid rate "often"`}},
		{"50/s", "{probes: 0}", "probes", []string{"must be 1-1000, got 0"}},
	} {
		_, err := Parse([]byte(breakerDoc(tt.rate, tt.breaker)))
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("rate %s, breaker %s: got %v, want an *Error", tt.rate, tt.breaker, err)
			continue
		}
		if want := "downstreams[0].breaker." + tt.field; e.Path != want {
			t.Errorf("rate %s, breaker %s: path %q, want %q (%v)", tt.rate, tt.breaker, e.Path, want, err)
		}
		for _, w := range tt.want {
			if !strings.Contains(e.Msg, w) {
				t.Errorf("rate %s, breaker %s: message %q lacks %q", tt.rate, tt.breaker, e.Msg, w)
			}
		}
	}
}

// The config's rules are breakerspec's, which shaping.Dispatcher.Add
// applies too: a spec that passes here passes there.
func TestBreakerSpecOfConfig(t *testing.T) {
	t.Parallel()
	d := mustParse(t, breakerDoc("20/s", "{window: 2s, min_calls: 10, probe_rate: 2/s}")).Downstreams[0]
	s := d.Breaker.Spec()
	if p := s.Check(d.Limit()); p != nil {
		t.Errorf("Check of a parsed breaker: %v", p)
	}
	if s.ProbeRate != limiters.PerSecond(2) || s.Window != 2*time.Second || s.MinCalls != 10 {
		t.Errorf("Spec() = %+v", s)
	}
}
