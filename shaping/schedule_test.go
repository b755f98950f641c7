package shaping_test

import (
	"github.com/shaper-io/shaper/shaping"
	"testing"
	"time"
)

func TestRateScheduleBusinessHours(t *testing.T) {
	t.Parallel()
	loc := time.UTC
	day, err := shaping.ParseRateChange("0 8 * * 1-5", "50/s", loc)
	must(t, err)
	night, err := shaping.ParseRateChange("0 20 * * 1-5", "500/s", loc)
	must(t, err)
	rs := shaping.RateSchedule{day, night}
	steps := []struct {
		at   string
		want int64
		next string
	}{
		{"2026-11-30T07:59:59Z", 500, "2026-11-30T08:00:00Z"}, // Monday before 8: Friday night's rate
		{"2026-11-30T08:00:00Z", 50, "2026-11-30T20:00:00Z"},
		{"2026-11-30T19:59:59Z", 50, "2026-11-30T20:00:00Z"},
		{"2026-11-30T20:00:00Z", 500, "2026-12-01T08:00:00Z"},
		{"2026-12-05T12:00:00Z", 500, "2026-12-07T08:00:00Z"}, // Saturday noon
	}
	for i, s := range steps {
		at, _ := time.Parse(time.RFC3339, s.at)
		got, next, ok := rs.At(at)
		if !ok || got.Rate != s.want || next.Format(time.RFC3339) != s.next {
			t.Errorf("step %d (%s): rate %d next %s ok %v, want %d next %s", i, s.at, got.Rate, next.Format(time.RFC3339), ok, s.want, s.next)
		}
	}
	if _, _, _, found := rs.Overlap(time.Date(2026, 1, 1, 0, 0, 0, 0, loc)); found {
		t.Error("business-hours schedule reported as overlapping")
	}
}

func TestRateScheduleOverlapAndErrors(t *testing.T) {
	t.Parallel()
	a, _ := shaping.ParseRateChange("*/10 * * * * *", "5/s", nil)
	b, _ := shaping.ParseRateChange("0 * * * * *", "7/s", nil)
	if _, _, _, found := (shaping.RateSchedule{a, b}).Overlap(time.Now()); !found {
		t.Error("every-10s and every-minute fire together at :00; want an overlap")
	}
	for _, bad := range []string{"61 * * * *", "* * *", "@hourly extra", "banana"} {
		if _, err := shaping.ParseRateChange(bad, "5/s", nil); err == nil {
			t.Errorf("cron %q: want an error", bad)
		}
	}
	if _, err := shaping.ParseRateChange("@every 1h", "fast", nil); err == nil {
		t.Error("rate fast: want an error")
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	must(t, err) // the shaper binary embeds time/tzdata; tests need the system's
	c, err := shaping.ParseRateChange("0 8 * * *", "9/s", berlin)
	must(t, err)
	_, next, _ := (shaping.RateSchedule{c}).At(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC))
	if want := time.Date(2026, 6, 1, 6, 0, 0, 0, time.UTC); !next.Equal(want) { // 08:00 CEST = 06:00 UTC
		t.Errorf("Berlin 08:00 next = %v, want %v", next.UTC(), want)
	}
}
