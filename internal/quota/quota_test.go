package quota

import (
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/testutil"
)

// TestCheck: the one rule for quotas names the first quota out of range
// as the file and as Go spell it, with the values.
func TestCheck(t *testing.T) {
	hour := Quota{Limit: 10, Per: time.Hour}
	cases := []struct {
		name             string
		qs               []Quota
		maxRelease       int64
		field, goF, want string
	}{
		{"fine", []Quota{hour, {Limit: 100, Per: 24 * time.Hour, Aligned: true, Offset: time.Hour}}, 10, "", "", ""},
		{"limit", []Quota{hour, {Limit: 0, Per: time.Hour}}, 1, "quotas[1].limit", "Quotas[1].Limit", "must be at least 1, got 0"},
		{"per", []Quota{{Limit: 10, Per: 1500 * time.Microsecond}}, 1, "quotas[0].per", "Quotas[0].Per", "from 1s to 8784h0m0s, got 1.5ms"},
		{"offset", []Quota{{Limit: 10, Per: time.Hour, Offset: time.Minute}}, 1, "quotas[0].align", "Quotas[0].Offset", "only set with Aligned"},
		{"margin", []Quota{{Limit: 10, Per: 4 * time.Second, Margin: 2 * time.Second}}, 1, "quotas[0].margin", "Quotas[0].Margin", "a quarter of the period (1s), got 2s"},
		{"twice", []Quota{hour, {Limit: 20, Per: time.Hour}}, 1, "quotas[1]", "Quotas[1]", "same period and alignment as quota [0]"},
		{"cost", []Quota{hour}, 11, "quotas[0].limit", "Quotas[0].Limit", "10 is below the largest release's cost, 11"},
		{"spread", []Quota{{Limit: 5, Per: 168 * time.Hour, Spread: true}}, 1, "quotas[0]", "Quotas[0]", "limit 5 per 168h0m0s with spread"},
	}
	for _, c := range cases {
		testutil.WantProblem(t, c.name, Check(c.qs, c.maxRelease), c.field, c.goF, c.want)
	}
	if err := (Quota{Limit: 10}).Validate(); err == nil || !strings.HasPrefix(err.Error(), "Per: must be") {
		t.Errorf("Validate of a quota without Per: %v, want Per named first", err)
	}
}

// TestCostCap: a default max cost stays within the smallest quota and a
// spread quota's pace, per row of a batch, at least 1, so that Check
// passes it.
func TestCostCap(t *testing.T) {
	qs := []Quota{{Limit: 700, Per: time.Hour}, {Limit: 70, Per: 24 * time.Hour}}
	for _, c := range []struct {
		qs   []Quota
		rows int64
		want int64
	}{
		{nil, 1, 0},
		{qs, 1, 70},
		{qs, 50, 1},
		{qs, 20, 3},
		{qs, 100, 1}, // at least 1, which Check then refuses for 100 rows
		{[]Quota{{Limit: 1000, Per: 48 * time.Hour, Spread: true}}, 1, 500}, // a day's pace of 1000 per 48h
	} {
		got := CostCap(c.qs, c.rows)
		if got != c.want {
			t.Errorf("CostCap(%v, %d) = %d, want %d", c.qs, c.rows, got, c.want)
		}
		if got > 0 && c.rows*got <= minLimit(c.qs) && Check(c.qs, c.rows*got) != nil {
			t.Errorf("CostCap(%v, %d) = %d fails Check: %v", c.qs, c.rows, got, Check(c.qs, c.rows*got))
		}
	}
}

func minLimit(qs []Quota) int64 {
	m := qs[0].Limit
	for _, q := range qs {
		m = min(m, q.Limit)
	}
	return m
}
