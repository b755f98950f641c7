package taskspec

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/queue"
)

// "collapse_key" reaches queue.Task.CollapseKey: 1 to 1024 bytes of
// printable text. Left out or null is no key; anything else is refused in
// one line that names the field and the value.
func TestParseCollapseKey(t *testing.T) {
	t.Parallel()
	now := time.Now()
	long := strings.Repeat("k", queue.MaxCollapseKey)
	for i, c := range []struct{ in, want string }{
		{`{"downstream":"api","collapse_key":"sync tenant-7"}`, "sync tenant-7"},
		{`{"downstream":"api","collapse_key":"über/{tenant}:7"}`, "über/{tenant}:7"},
		{`{"downstream":"api","collapse_key":"` + long + `"}`, long},
		{`{"downstream":"api","collapse_key":null}`, ""},
		{`{"downstream":"api"}`, ""},
	} {
		s, err := Parse([]byte(c.in))
		if err != nil {
			t.Errorf("case %d: Parse = %v", i, err)
			continue
		}
		task, err := s.Task(now)
		if err != nil || task.CollapseKey != c.want {
			t.Errorf("case %d: collapse key %q (%v), want %q", i, task.CollapseKey, err, c.want)
		}
	}

	for i, c := range []struct{ in, want string }{
		{`{"collapse_key":""}`, "collapse_key: must not be empty (leave it out for a task that is never collapsed)"},
		{`{"collapse_key":"` + long + `k"}`, "collapse_key: must be at most 1024 bytes, got 1025"},
		{`{"collapse_key":"a\nb"}`, `collapse_key: must be printable text, got "a\nb" (control character U+000A at byte 1)`},
		{`{"collapse_key":"a\r\n"}`, `collapse_key: must be printable text, got "a\r\n" (control character U+000D at byte 1)`},
		{`{"collapse_key":"\u0000"}`, `collapse_key: must be printable text, got "\x00" (control character U+0000 at byte 0)`},
		{`{"collapse_key":"tab\there"}`, `collapse_key: must be printable text, got "tab\there" (control character U+0009 at byte 3)`},
		{`{"collapse_key":7}`, "collapse_key: got the number 7, want a string"},
		{`{"collapse_key":["a"]}`, "collapse_key: got an array, want a string"},
		{`{"collapse_key":"a","collapse_key":"b"}`, "collapse_key: set twice (each field once: JSON decoders disagree on which one counts)"},
	} {
		_, err := Parse([]byte(c.in))
		if err == nil || err.Error() != c.want || !errors.Is(err, ErrInvalid) {
			t.Errorf("case %d: Parse(%s) = %v, want %q", i, c.in, err, c.want)
		}
	}

	// A Spec built in code (the CLI's flags) is checked by Task too.
	api := "api"
	for i, c := range []struct{ key, want string }{
		{"", "collapse_key: must not be empty"},
		{"a\x7fb", `collapse_key: must be printable text, got "a\x7fb" (control character U+007F at byte 1)`},
		{"a\xffb", `collapse_key: must be valid UTF-8, got "a\xffb"`},
		{long + "k", "collapse_key: must be at most 1024 bytes, got 1025"},
	} {
		_, err := Spec{Downstream: &api, CollapseKey: &c.key}.Task(now)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) || strings.ContainsAny(err.Error(), "\r\n") || !errors.Is(err, ErrInvalid) {
			t.Errorf("case %d: Task with collapse key %q = %v, want one line starting %q", i, c.key, err, c.want)
		}
	}
}

// A line's collapse key is its own; one it leaves out comes from the
// defaults (the CLI's --collapse-key), unlike "unique".
func TestMergeCollapseKey(t *testing.T) {
	t.Parallel()
	def, own := "flag", "line"
	defaults := Spec{CollapseKey: &def}
	for i, c := range []struct {
		s    Spec
		want string
	}{
		{Spec{}, "flag"},
		{Spec{CollapseKey: &own}, "line"},
	} {
		got := c.s.Merge(defaults)
		if got.CollapseKey == nil || *got.CollapseKey != c.want {
			t.Errorf("case %d: merged collapse key %v, want %q", i, got.CollapseKey, c.want)
		}
	}
	if got := (Spec{}).Merge(Spec{}); got.CollapseKey != nil {
		t.Errorf("merged with no key anywhere: %q, want none", *got.CollapseKey)
	}
}
