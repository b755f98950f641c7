package taskspec

// The parsers of the task object's fields, one per field, and the
// checks they share (ranges, printable text).

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/shaper-io/shaper/internal/jsontext"
	"github.com/shaper-io/shaper/internal/priority"
	"github.com/shaper-io/shaper/queue"
)

// fieldParsers decode each field (present, not null) into a Spec, in the
// order Parse checks them: the first bad one is the error.
var fieldParsers = []struct {
	name  string
	parse func(s *Spec, field string, v json.RawMessage) *Error
}{
	{"downstream", func(s *Spec, f string, v json.RawMessage) *Error { return setString(&s.Downstream, f, v) }},
	{"type", func(s *Spec, f string, v json.RawMessage) *Error { return setString(&s.Type, f, v) }},
	{"key", func(s *Spec, f string, v json.RawMessage) *Error { return setString(&s.Key, f, v) }},
	{"unique", func(s *Spec, f string, v json.RawMessage) *Error { return setString(&s.Unique, f, v) }},
	{"collapse_key", parseCollapseKey},
	{"payload", func(s *Spec, _ string, v json.RawMessage) *Error {
		s.Payload = append([]byte(nil), v...)
		return nil
	}},
	{"payload_base64", parseBase64},
	{"cost", parseCost},
	{"max_retry", parseMaxRetry},
	{"priority", parsePriority},
	{"at", func(s *Spec, _ string, v json.RawMessage) *Error {
		t, err := parseAtJSON(v)
		if err == nil {
			s.At = &t
		}
		return err
	}},
	{"in", func(s *Spec, f string, v json.RawMessage) *Error {
		d, err := durationJSON(f, v)
		if err == nil {
			s.In = &d
		}
		return err
	}},
	{"timeout", parseTimeout},
	{"deadline", func(s *Spec, f string, v json.RawMessage) *Error {
		t, err := parseAtJSON(v)
		if err != nil {
			err.Field = f
		} else {
			s.Deadline = &t
		}
		return err
	}},
	{"ttl", func(s *Spec, f string, v json.RawMessage) *Error {
		d, err := durationJSON(f, v)
		if err == nil && d == 0 {
			err = errf(f, "must be positive, got 0 (leave it out for no deadline)")
		}
		if err == nil {
			s.TTL = &d
		}
		return err
	}},
}

func setString(dst **string, field string, v json.RawMessage) *Error {
	var out string
	if json.Unmarshal(v, &out) != nil {
		return errf(field, "got %s, want a string", jsontext.Describe(v))
	}
	*dst = &out
	return nil
}

// parseCollapseKey reads a collapse key: a string that CheckCollapseKey
// accepts.
func parseCollapseKey(s *Spec, field string, v json.RawMessage) *Error {
	var k *string
	if err := setString(&k, field, v); err != nil {
		return err
	}
	if msg := CheckCollapseKey(*k); msg != "" {
		return errf(field, "%s", msg)
	}
	s.CollapseKey = k
	return nil
}

// CheckCollapseKey says what is wrong with k as a collapse key, as "must
// not be empty (…)" or "must be printable text, got "a\nb" (control
// character U+000A at byte 1)"; "" when k is 1 to queue.MaxCollapseKey
// bytes of printable UTF-8 text (no control characters).
func CheckCollapseKey(k string) string {
	switch {
	case k == "":
		return "must not be empty (leave it out for a task that is never collapsed)"
	case len(k) > queue.MaxCollapseKey:
		return fmt.Sprintf("must be at most %d bytes, got %d", queue.MaxCollapseKey, len(k))
	case !utf8.ValidString(k):
		return fmt.Sprintf("must be valid UTF-8, got %q", jsontext.Clip(k, 80))
	}
	for i, r := range k {
		if unicode.IsControl(r) {
			return fmt.Sprintf("must be printable text, got %q (control character %U at byte %d)", jsontext.Clip(k, 80), r, i)
		}
	}
	return ""
}

func parseBase64(s *Spec, field string, v json.RawMessage) *Error {
	if s.Payload != nil {
		return errf(field, "set both payload and payload_base64; use one")
	}
	var enc string
	if json.Unmarshal(v, &enc) != nil {
		return errf(field, "got %s, want a base64 string", jsontext.Describe(v))
	}
	b, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return errf(field, "invalid base64 (%v)", err)
	}
	s.Payload = b
	return nil
}

func parseCost(s *Spec, field string, v json.RawMessage) *Error {
	n, err := boundedInt(field, v, 0)
	if err == nil {
		s.Cost = &n
	}
	return err
}

func parseMaxRetry(s *Spec, field string, v json.RawMessage) *Error {
	n, err := boundedInt(field, v, MaxRetryBound)
	if err == nil {
		r := int(n)
		s.MaxRetry = &r
	}
	return err
}

// parsePriority reads a priority: an integer from priority.First to
// priority.Last. 0 is refused: leaving the field out is how a task asks
// for its downstream's default.
func parsePriority(s *Spec, field string, v json.RawMessage) *Error {
	var n json.Number
	if len(v) == 0 || v[0] == '"' || json.Unmarshal(v, &n) != nil {
		return errf(field, "%s, got %s", priorityRange, jsontext.Describe(v))
	}
	p, err := strconv.Atoi(n.String())
	if err != nil {
		return errf(field, "%s, got %s", priorityRange, jsontext.Clip(n.String(), 40))
	}
	if msg := OutOfPriority(p); msg != "" {
		return errf(field, "%s", msg)
	}
	s.Priority = &p
	return nil
}

// priorityRange says which priorities a task may name.
var priorityRange = fmt.Sprintf("must be an integer from %d (first) to %d (last)", priority.First, priority.Last)

// OutOfPriority says how p falls outside priority.First..priority.Last,
// as "must be an integer from 1 (first) to 5 (last), got 9"; "" when p is
// a priority. 0 is outside: a task that wants its downstream's default
// leaves the priority out.
func OutOfPriority(p int) string {
	switch {
	case p == 0:
		return fmt.Sprintf("%s, got 0 (leave it out for the downstream's default)", priorityRange)
	case p < priority.First || p > priority.Last:
		return fmt.Sprintf("%s, got %d", priorityRange, p)
	}
	return ""
}

// MaxRetryBound is the largest max_retry a task may ask for.
const MaxRetryBound = 10000

// OutOfRange says how n falls outside 0..hi (hi 0: no upper bound), as
// "must not be negative, got -1" or "must be 0..10000, got 20000"; "" when
// n is within.
func OutOfRange(n, hi int64) string {
	switch {
	case hi > 0 && (n < 0 || n > hi):
		return fmt.Sprintf("must be 0..%d, got %d", hi, n)
	case n < 0:
		return fmt.Sprintf("must not be negative, got %d", n)
	}
	return ""
}

// boundedInt reads an integer field within 0..hi (hi 0: no upper bound).
func boundedInt(field string, v json.RawMessage, hi int64) (int64, *Error) {
	n, err := integer(field, v)
	if err != nil {
		return 0, err
	}
	if msg := OutOfRange(n, hi); msg != "" {
		return 0, errf(field, "%s", msg)
	}
	return n, nil
}

func parseTimeout(s *Spec, field string, v json.RawMessage) *Error {
	d, err := durationJSON(field, v)
	if err != nil {
		return err
	}
	if d == 0 {
		return errf(field, "must be positive, got 0 (leave it out for the default)")
	}
	s.Timeout = &d
	return nil
}

func known(name string) bool {
	for _, f := range Fields {
		if f == name {
			return true
		}
	}
	return false
}
