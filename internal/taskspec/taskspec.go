// Package taskspec is the JSON form of a task, shared by the enqueue CLI's
// JSON Lines input and the HTTP enqueue API, so that a line of a JSON Lines
// file can be POSTed as it is and both reject the same inputs with the same
// words.
//
// A task is one JSON object:
//
//	{"downstream": "billing-api", "payload": {"invoice": 42}, "key": "tenant-7",
//	 "cost": 1, "unique": "invoice-42", "in": "30s", "type": "charge", "max_retry": 3,
//	 "priority": 2, "ttl": "5m", "collapse_key": "sync-tenant-7"}
//
// Decoding is strict: an unknown field, a value of the wrong type, a second
// JSON value after the object, or a field out of range is an *Error that
// names the field and the bad value in one line.
package taskspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/shaper-io/shaper/internal/duration"
	"github.com/shaper-io/shaper/internal/jsontext"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
)

// ErrInvalid is wrapped by every error of this package.
var ErrInvalid = errors.New("taskspec: invalid task")

// Fields lists the fields a task object may have, in documentation order.
var Fields = []string{"downstream", "payload", "payload_base64", "key", "cost", "unique", "collapse_key", "at", "in", "type", "max_retry", "priority", "timeout", "deadline", "ttl"}

// Error is a bad task: Field names the field ("" for the object as a
// whole) and Msg says what is wrong with it, on one line.
type Error struct {
	Field string
	Msg   string
}

func (e *Error) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *Error) Unwrap() error { return ErrInvalid }

func errf(field, format string, args ...any) *Error {
	return &Error{Field: field, Msg: OneLine(fmt.Sprintf(format, args...))}
}

// Spec is a decoded task. A nil pointer (or nil Payload) is a field left
// out (or written as null), so that Merge can fill it from defaults.
type Spec struct {
	Downstream *string
	Type       *string
	// Payload is the payload's bytes: the JSON text of "payload" as it was
	// written, or the decoded bytes of "payload_base64".
	Payload []byte
	Key     *string
	Cost    *int64
	Unique  *string
	// CollapseKey is the task's collapse key (queue.Task.CollapseKey): 1
	// to queue.MaxCollapseKey bytes of printable text.
	CollapseKey *string
	At          *time.Time
	In          *time.Duration
	MaxRetry    *int
	// Priority is the task's priority, priority.First to priority.Last
	// (queue.Task.Priority); nil is the downstream's default.
	Priority *int
	Timeout  *time.Duration
	// Deadline and TTL are the task's deadline, absolute or from now
	// (queue.Task.Deadline, TTL); at most one is set.
	Deadline *time.Time
	TTL      *time.Duration
}

// Parse decodes one task object. data must hold exactly one JSON object
// (surrounding white space allowed, and a UTF-8 byte order mark before it:
// editors on Windows write one, and the CLI and the HTTP API must agree).
func Parse(data []byte) (Spec, error) {
	fields, err := decodeObject(data)
	if err != nil {
		return Spec{}, err
	}
	var s Spec
	for _, p := range fieldParsers {
		v, ok := fields[p.name]
		if !ok || string(v) == "null" {
			continue
		}
		if err := p.parse(&s, p.name, v); err != nil {
			return Spec{}, err
		}
	}
	if s.At != nil && s.In != nil {
		return Spec{}, errf("in", "set both at and in; use one")
	}
	if s.Deadline != nil && s.TTL != nil {
		return Spec{}, errf("ttl", "set both deadline and ttl; use one")
	}
	return s, nil
}

// decodeObject reads data as one JSON object of known fields, each set
// once, and returns the fields' raw values.
func decodeObject(data []byte) (map[string]json.RawMessage, *Error) {
	data = bytes.TrimSpace(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")))
	if len(data) == 0 {
		return nil, errf("", "empty input, want a JSON object")
	}
	if !utf8.Valid(data) {
		return nil, errf("", "input is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var fields map[string]json.RawMessage
	if err := dec.Decode(&fields); err != nil {
		return nil, jsonError(err, data)
	}
	if fields == nil {
		return nil, errf("", "got null, want a JSON object")
	}
	if dec.More() || dec.InputOffset() < int64(len(data)) {
		return nil, errf("", "unexpected data after the JSON object at byte %d (one task per object)", dec.InputOffset()+1)
	}
	if name, dup := duplicateKey(data); dup {
		return nil, errf(jsontext.Clip(name, 40), "set twice (each field once: JSON decoders disagree on which one counts)")
	}
	for name := range fields {
		if !known(name) {
			return nil, errf("", "unknown field %q (want one of %s)", jsontext.Clip(name, 40), strings.Join(Fields, ", "))
		}
	}
	return fields, nil
}

// Merge returns s with every field it leaves out taken from d. The start
// time is taken as a whole: when s sets at or in, d's at and in are ignored;
// so is the deadline (deadline, ttl).
// Unique is never taken from d (one unique key fits one task); CollapseKey
// is (tasks that share one collapse into one another).
func (s Spec) Merge(d Spec) Spec {
	if s.Downstream == nil {
		s.Downstream = d.Downstream
	}
	if s.Type == nil {
		s.Type = d.Type
	}
	if s.Payload == nil {
		s.Payload = d.Payload
	}
	if s.Key == nil {
		s.Key = d.Key
	}
	if s.CollapseKey == nil {
		s.CollapseKey = d.CollapseKey
	}
	if s.Cost == nil {
		s.Cost = d.Cost
	}
	if s.At == nil && s.In == nil {
		s.At, s.In = d.At, d.In
	}
	if s.MaxRetry == nil {
		s.MaxRetry = d.MaxRetry
	}
	if s.Priority == nil {
		s.Priority = d.Priority
	}
	if s.Timeout == nil {
		s.Timeout = d.Timeout
	}
	if s.Deadline == nil && s.TTL == nil {
		s.Deadline, s.TTL = d.Deadline, d.TTL
	}
	return s
}

// Task builds the queue.Task, with "in" counted from now. It checks what
// Parse cannot: a downstream is present. The Producer validates the rest
// (known downstream, payload size, key length) when it enqueues, or
// earlier through Producer.Validate.
func (s Spec) Task(now time.Time) (queue.Task, error) {
	var t queue.Task
	if s.Downstream == nil || *s.Downstream == "" {
		return t, errf("downstream", "required")
	}
	t.Downstream = *s.Downstream
	if s.Type != nil {
		t.Type = *s.Type
	}
	t.Payload = s.Payload
	if s.Key != nil {
		t.Key = *s.Key
	}
	if s.Cost != nil {
		if *s.Cost < 0 {
			return t, errf("cost", "must not be negative, got %d", *s.Cost)
		}
		t.Cost = *s.Cost
	}
	if s.Unique != nil {
		if *s.Unique == "" {
			return t, errf("unique", "must not be empty (leave it out for a task without a unique key)")
		}
		t.UniqueKey = *s.Unique
	}
	if s.CollapseKey != nil {
		if msg := CheckCollapseKey(*s.CollapseKey); msg != "" {
			return t, errf("collapse_key", "%s", msg)
		}
		t.CollapseKey = *s.CollapseKey
	}
	switch {
	case s.At != nil && s.In != nil:
		return t, errf("in", "set both at and in; use one")
	case s.At != nil:
		t.ProcessAt = *s.At
	case s.In != nil:
		if *s.In < 0 {
			return t, errf("in", "must not be negative, got %s", *s.In)
		}
		if *s.In > 0 {
			t.ProcessAt = now.Add(*s.In)
		}
	}
	if s.MaxRetry != nil {
		r := *s.MaxRetry
		t.MaxRetry = &r
	}
	if s.Priority != nil {
		if msg := OutOfPriority(*s.Priority); msg != "" {
			return t, errf("priority", "%s", msg)
		}
		t.Priority = *s.Priority
	}
	if s.Timeout != nil {
		if *s.Timeout <= 0 {
			return t, errf("timeout", "must be positive, got %s", *s.Timeout)
		}
		t.Timeout = *s.Timeout
	}
	switch {
	case s.Deadline != nil && s.TTL != nil:
		return t, errf("ttl", "set both deadline and ttl; use one")
	case s.Deadline != nil:
		t.Deadline = *s.Deadline
	case s.TTL != nil:
		if *s.TTL <= 0 {
			return t, errf("ttl", "must be positive, got %s", *s.TTL)
		}
		t.TTL = *s.TTL
	}
	return t, nil
}

// Reason is err's message for a person, without package prefixes, on one
// line: "cost: must not be negative, got -1".
func Reason(err error) string {
	msg := err.Error()
	for _, p := range []string{queue.ErrInvalidTask.Error() + ": ", "queue: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	if rest, ok := strings.CutPrefix(msg, limiters.ErrCostExceedsCapacity.Error()+": cost "); ok {
		msg = "cost: " + rest // one wording for every cost bound: "cost: N exceeds the capacity C of …"
	}
	return OneLine(msg)
}

// OneLine replaces line breaks and other control characters with spaces,
// so a message (which may quote user input) stays on one line.
func OneLine(s string) string {
	if !strings.ContainsFunc(s, isCtl) {
		return s
	}
	return strings.Map(func(r rune) rune {
		if isCtl(r) {
			return ' '
		}
		return r
	}, s)
}

func isCtl(r rune) bool { return r < 0x20 || r == 0x7f || r == 0x2028 || r == 0x2029 }

// ParseAt reads a start time: RFC 3339 ("2026-01-02T15:04:05Z", fractional
// seconds allowed) or Unix seconds ("1767366245", "1767366245.5").
func ParseAt(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && f > 0 && f < 1e11 && !math.IsInf(f, 0) {
		sec, frac := math.Modf(f)
		return time.Unix(int64(sec), int64(frac*1e9)), nil
	}
	return time.Time{}, fmt.Errorf("invalid time %q (want RFC 3339, e.g. 2026-01-02T15:04:05Z, or Unix seconds)", jsontext.Clip(s, 60))
}

// ParseDuration reads a delay as package duration reads every duration: a
// Go duration with a unit ("30s", "5m", "1h30m"), optionally with days
// first ("1d", "1d12h"). The JSON number form, seconds, is read elsewhere.
func ParseDuration(s string) (time.Duration, error) {
	d, err := duration.Parse(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (want a number with a unit, e.g. 30s, 5m or 1h30m)", jsontext.Clip(s, 60))
	}
	return d, nil
}

func parseAtJSON(v json.RawMessage) (time.Time, *Error) {
	var s string
	if json.Unmarshal(v, &s) == nil {
		t, err := ParseAt(s)
		if err != nil {
			return time.Time{}, errf("at", "%v", err)
		}
		return t, nil
	}
	var n json.Number
	if json.Unmarshal(v, &n) == nil {
		t, err := ParseAt(n.String())
		if err != nil {
			return time.Time{}, errf("at", "%v", err)
		}
		return t, nil
	}
	return time.Time{}, errf("at", "got %s, want an RFC 3339 string or Unix seconds", jsontext.Describe(v))
}

func durationJSON(field string, v json.RawMessage) (time.Duration, *Error) {
	var s string
	if json.Unmarshal(v, &s) == nil {
		d, err := ParseDuration(s)
		if err != nil {
			return 0, errf(field, "%v", err)
		}
		if d < 0 {
			return 0, errf(field, "must not be negative, got %s", d)
		}
		if d > maxDuration {
			return 0, errf(field, "must be at most %s (1e9 seconds, about 31 years), got %s", maxDuration, d)
		}
		return d, nil
	}
	var n json.Number
	if json.Unmarshal(v, &n) == nil {
		f, err := n.Float64()
		if err != nil || f < 0 || f > maxDuration.Seconds() {
			return 0, errf(field, "got %s, want seconds between 0 and 1e9", jsontext.Clip(n.String(), 40))
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	return 0, errf(field, "got %s, want a duration string such as \"30s\" or a number of seconds", jsontext.Describe(v))
}

// maxDuration bounds "in" and "timeout", in either form.
const maxDuration = 1e9 * time.Second

// duplicateKey reports a key that the object data (already decoded once,
// so valid) sets twice; encoding/json would keep the last silently.
func duplicateKey(data []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil { // {
		return "", false
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		key, _ := tok.(string)
		if seen[key] {
			return key, true
		}
		seen[key] = true
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return "", false
		}
	}
	return "", false
}

func integer(field string, v json.RawMessage) (int64, *Error) {
	var n json.Number
	if len(v) == 0 || v[0] == '"' || json.Unmarshal(v, &n) != nil {
		return 0, errf(field, "got %s, want an integer", jsontext.Describe(v))
	}
	i, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil {
		return 0, errf(field, "got %s, want an integer", jsontext.Clip(n.String(), 40))
	}
	return i, nil
}

// jsonError turns a decoding error into one line with the column.
func jsonError(err error, data []byte) *Error {
	return errf("", "%s", jsontext.DecodeReason(err, data, "an object"))
}
