package priority

import (
	"strings"
	"testing"
)

func TestWeightsFrom(t *testing.T) {
	for i, tc := range []struct {
		m       map[int]int
		want    string // Weights.String, or the error's text
		wantErr bool
	}{
		{nil, "strict", false},
		{map[int]int{}, "strict", false},
		{map[int]int{1: 8, 3: 2}, "1:8 2:1 3:2 4:1 5:1", false},
		{map[int]int{1: 8, 2: 4, 3: 2, 4: 1, 5: 1}, "1:8 2:4 3:2 4:1 5:1", false},
		{map[int]int{5: 1000}, "1:1 2:1 3:1 4:1 5:1000", false},
		{map[int]int{6: 1}, "level must be a priority from 1 (first) to 5 (last), got 6", true},
		{map[int]int{2: 0}, "weight must be an integer from 1 to 1000, got 0", true},
		{map[int]int{2: 1001}, "got 1001", true},
	} {
		w, err := WeightsFrom(tc.m)
		switch {
		case tc.wantErr && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("step %d: got %v, %v; want an error with %q", i, w, err, tc.want)
		case !tc.wantErr && (err != nil || w.String() != tc.want || w.Validate() != nil):
			t.Errorf("step %d: got %v, %v; want %s", i, w, err, tc.want)
		}
	}
	if err := (Weights{8, 1, 0, 1, 1}).Validate(); err == nil || !strings.Contains(err.Error(), "got 0") {
		t.Errorf("Validate of a zero weight among others: %v, want an error", err)
	}
}
