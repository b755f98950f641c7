package config

import (
	"errors"
	"strings"
	"testing"
)

func TestSubWindows(t *testing.T) {
	t.Parallel()
	lim := func(fields string) string {
		return "downstreams:\n  - name: api\n    rate: 1/s\n    handler: {type: log}\n    admission:\n      limiters:\n        - {" + fields + "}\n"
	}
	c := mustParse(t, lim("algorithm: sliding_counter, rate: 600/m, sub_windows: 60"))
	if got := c.Downstreams[0].Admission.Limiters[0].SubWindows; got != 60 {
		t.Errorf("sub_windows: 60 parsed as %d", got)
	}
	if got := mustParse(t, lim("algorithm: sliding_counter, rate: 600/m")).Downstreams[0].Admission.Limiters[0].SubWindows; got != 0 {
		t.Errorf("sub_windows left out: %d, want 0 (the two-window counter)", got)
	}
	const path = "downstreams[0].admission.limiters[0].sub_windows"
	for _, tt := range []struct {
		name, doc string
		want      []string
	}{
		{"one", lim("algorithm: sliding_counter, rate: 10/s, sub_windows: 1"), []string{"2 to 1000", "got 1"}},
		{"zero written out", lim("algorithm: sliding_counter, rate: 10/s, sub_windows: -1"), []string{"got -1"}},
		{"too many", lim("algorithm: sliding_counter, rate: 10/s, sub_windows: 1001"), []string{"got 1001"}},
		{"not sliding_counter", lim("algorithm: fixed_window, rate: 10/s, sub_windows: 10"), []string{"10 sub-windows need algorithm sliding_counter, got fixed_window"}},
		{"default algorithm", lim("rate: 10/s, sub_windows: 10"), []string{"got token_bucket"}},
		{"window too short", lim("algorithm: sliding_counter, rate: 1/50us, sub_windows: 60"), []string{"50µs", "60 sub-windows"}},
	} {
		_, err := Parse([]byte(tt.doc))
		var e *Error
		if !errors.As(err, &e) || e.Path != path {
			t.Errorf("%s: err = %v, want an *Error at %s", tt.name, err, path)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not contain %q", tt.name, err, w)
			}
		}
	}
	// One name is one limiter's state: its sub-windows must agree too.
	shared := "downstreams:\n" +
		"  - {name: a, rate: 1/s, handler: {type: log}, admission: {limiters: [{name: t, algorithm: sliding_counter, rate: 10/s, sub_windows: 10}]}}\n" +
		"  - {name: b, rate: 1/s, handler: {type: log}, admission: {limiters: [{name: t, algorithm: sliding_counter, rate: 10/s}]}}\n"
	if _, err := Parse([]byte(shared)); err == nil || !strings.Contains(err.Error(), "downstreams[1].admission.limiters[0].name") {
		t.Errorf("shared name with other sub_windows: err = %v, want an error at downstreams[1]'s limiter name", err)
	}
}
