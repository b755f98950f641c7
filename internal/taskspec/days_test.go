package taskspec

import (
	"strings"
	"testing"
	"time"
)

// in, ttl and timeout read durations as the config file does: days are a
// unit ("1d", "1.5d", "1d12h"), and what the config refuses they refuse.
func TestDurationsTakeDays(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	for i, tt := range []struct {
		field, value string
		want         time.Duration
		wantErr      string
	}{
		{"in", "1d", 24 * time.Hour, ""},
		{"in", " 2d ", 48 * time.Hour, ""},
		{"ttl", "1d12h", 36 * time.Hour, ""},
		{"timeout", "1.5d", 36 * time.Hour, ""},
		{"in", "30s", 30 * time.Second, ""},
		{"in", "1dd", 0, `in: invalid duration "1dd"`},
		{"ttl", "-1d", 0, `ttl: invalid duration "-1d"`},
		{"timeout", "1day", 0, `timeout: invalid duration "1day"`},
	} {
		s, err := Parse([]byte(`{"downstream":"api","` + tt.field + `":"` + tt.value + `"}`))
		var got time.Duration
		if err == nil {
			tk, terr := s.Task(now)
			err = terr
			switch tt.field {
			case "in":
				got = tk.ProcessAt.Sub(now)
			case "ttl":
				got = tk.TTL
			case "timeout":
				got = tk.Timeout
			}
		}
		switch {
		case tt.wantErr == "" && (err != nil || got != tt.want):
			t.Errorf("step %d: %s %q: got %v, %v; want %v", i, tt.field, tt.value, got, err, tt.want)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("step %d: %s %q: got %v, %v; want an error containing %q", i, tt.field, tt.value, got, err, tt.wantErr)
		}
	}
}
