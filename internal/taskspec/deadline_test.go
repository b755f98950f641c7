package taskspec

import (
	"strings"
	"testing"
	"time"
)

func TestDeadlineAndTTL(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	task := func(in string) (deadline time.Time, ttl time.Duration, err error) {
		s, err := Parse([]byte(in))
		if err != nil {
			return time.Time{}, 0, err
		}
		tk, err := s.Task(now)
		return tk.Deadline, tk.TTL, err
	}
	d, ttl, err := task(`{"downstream":"api","deadline":"2026-01-02T15:00:05Z"}`)
	if err != nil || !d.Equal(now.Add(5*time.Second)) || ttl != 0 {
		t.Errorf("deadline: %v, %v, %v", d, ttl, err)
	}
	if d, ttl, err = task(`{"downstream":"api","ttl":"1m"}`); err != nil || ttl != time.Minute || !d.IsZero() {
		t.Errorf("ttl: %v, %v, %v", d, ttl, err)
	}
	if _, ttl, err = task(`{"downstream":"api","ttl":2.5}`); err != nil || ttl != 2500*time.Millisecond {
		t.Errorf("ttl in seconds: %v, %v", ttl, err)
	}
	for in, want := range map[string]string{
		`{"downstream":"api","ttl":"1m","deadline":"2026-01-02T15:00:05Z"}`: "ttl: set both deadline and ttl; use one",
		`{"downstream":"api","ttl":"0s"}`:                                   "ttl: must be positive, got 0",
		`{"downstream":"api","ttl":"soon"}`:                                 `ttl: invalid duration "soon"`,
		`{"downstream":"api","deadline":"tomorrow"}`:                        `deadline: invalid time "tomorrow"`,
	} {
		if _, _, err := task(in); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: %v, want an error starting %q", in, err, want)
		}
	}
	// Merge takes the deadline as a whole.
	ttl1, ttl2 := time.Minute, time.Hour
	dl := now
	m := Spec{TTL: &ttl1}.Merge(Spec{Deadline: &dl, TTL: &ttl2})
	if m.TTL != &ttl1 || m.Deadline != nil {
		t.Errorf("Merge = deadline %v ttl %v, want the line's ttl alone", m.Deadline, m.TTL)
	}
}
