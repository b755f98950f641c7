package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestPriorityWeights: priority.weights takes levels 1-5 to weights
// 1-1000; a bad level or weight, a fraction, a level given twice or a
// value that is no mapping is one error that names the field with its
// level and the value, on the line of the weights.
func TestPriorityWeights(t *testing.T) {
	t.Parallel()
	doc := func(prio string) string {
		return "downstreams:\n  - name: api\n    rate: 5/s\n    handler: {type: log}\n    priority: " + prio + "\n"
	}
	for _, tt := range []struct {
		prio     string
		want     PriorityWeights // when good
		wantPath string          // when bad
		wantMsg  []string
	}{
		{prio: "{}", want: nil},
		{prio: "{default: 2, weights: {1: 8, 2: 4, 3: 2, 4: 1, 5: 1}}", want: map[int]int{1: 8, 2: 4, 3: 2, 4: 1, 5: 1}},
		{prio: "{weights: {1: 1000, 5: 1}}", want: map[int]int{1: 1000, 5: 1}},
		{prio: "{weights: {6: 2}}", wantPath: "downstreams[0].priority.weights[6]",
			wantMsg: []string{"level must be a priority from 1 (first) to 5 (last), got 6"}},
		{prio: "{weights: {0: 2}}", wantPath: "downstreams[0].priority.weights[0]", wantMsg: []string{"got 0"}},
		{prio: "{weights: {1: 8, 3: 0}}", wantPath: "downstreams[0].priority.weights[3]",
			wantMsg: []string{"weight must be an integer from 1 to 1000, got 0"}},
		{prio: "{weights: {2: -1}}", wantPath: "downstreams[0].priority.weights[2]", wantMsg: []string{"got -1"}},
		{prio: "{weights: {1: 1001}}", wantPath: "downstreams[0].priority.weights[1]", wantMsg: []string{"got 1001"}},
		{prio: "{weights: {high: 2}}", wantPath: "downstreams[0].priority.weights.high", wantMsg: []string{`mapping key "high" is not a level`}},
		{prio: "{weights: {1: 2.5}}", wantPath: "downstreams[0].priority.weights.1", wantMsg: []string{`invalid weight "2.5"`}},
		{prio: "{weights: {1: 2, 1: 3}}", wantPath: "downstreams[0].priority.weights.1", wantMsg: []string{"level 1 is given twice"}},
		{prio: "{weights: 3}", wantPath: "downstreams[0].priority.weights", wantMsg: []string{`invalid weights "3"`}},
	} {
		t.Run(tt.prio, func(t *testing.T) {
			c, err := Parse([]byte(doc(tt.prio)))
			if tt.wantPath == "" {
				if err != nil {
					t.Fatalf("Parse: %v, want it accepted", err)
				}
				if got := c.Downstreams[0].Priority.Weights; fmt.Sprint(got) != fmt.Sprint(tt.want) {
					t.Errorf("weights %v, want %v", got, tt.want)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse: %v, want an *Error wrapping ErrInvalid about %s", err, tt.wantPath)
			}
			if e.Path != tt.wantPath || e.Line != 5 {
				t.Errorf("error at %s line %d, want %s line 5 (%v)", e.Path, e.Line, tt.wantPath, err)
			}
			for _, w := range tt.wantMsg {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
