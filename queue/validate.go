package queue

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxTypeLen bounds a task's Type, in bytes.
const MaxTypeLen = 128

// checkText refuses a unique key or a type that a task could carry into
// Redis but not out of it. A unique key becomes the task's ID, which the
// HTTP handler sends as the Idempotency-Key header: net/http refuses a
// header value with a control character (the request then fails on every
// attempt until the task is archived), and it trims spaces at either end
// (the downstream would see another key than the task's ID). The type gets
// the same rule, and a length bound, because it is shown in logs, the
// status page and asynq's tools.
func checkText(t Task) error {
	// The admission key travels in a protobuf string (asynq's message),
	// which must be UTF-8; anything else is allowed in it.
	if !utf8.ValidString(t.Key) {
		return fmt.Errorf("%w: key %s: not valid UTF-8", ErrInvalidTask, quote(t.Key))
	}
	if t.UniqueKey != "" {
		if why := badText(t.UniqueKey); why != "" {
			return fmt.Errorf("%w: unique key %s: %s", ErrInvalidTask, quote(t.UniqueKey), why)
		}
	}
	if len(t.Type) > MaxTypeLen {
		return fmt.Errorf("%w: type %s is %d bytes, over the limit of %d", ErrInvalidTask, quote(t.Type), len(t.Type), MaxTypeLen)
	}
	if t.Type != "" {
		if why := badText(t.Type); why != "" {
			return fmt.Errorf("%w: type %s: %s", ErrInvalidTask, quote(t.Type), why)
		}
	}
	return nil
}

// checkStart refuses a deadline the task could never meet: one before the
// time it may first run (ProcessAt, or now), such as a deadline in 1970 or
// before ProcessAt, or a TTL that ends before ProcessAt. Enqueued, such a
// task would only be archived unsent ("deadline passed").
func checkStart(t Task, now time.Time) error {
	dl := t.deadline(now)
	if dl.IsZero() {
		return nil
	}
	field := "deadline " + dl.UTC().Format(time.RFC3339Nano)
	if t.TTL > 0 {
		field = fmt.Sprintf("ttl %s (a deadline of %s)", t.TTL, dl.UTC().Format(time.RFC3339Nano))
	}
	switch {
	case t.ProcessAt.After(now) && dl.Before(t.ProcessAt):
		return fmt.Errorf("%w: %s is before the task's process-at time %s: it could never start in time", ErrInvalidTask, field, t.ProcessAt.UTC().Format(time.RFC3339Nano))
	case dl.Before(now):
		return fmt.Errorf("%w: %s has already passed (now %s): the task could never start in time", ErrInvalidTask, field, now.UTC().Format(time.RFC3339))
	}
	return nil
}

// badText says what is wrong with s, or "" when s is printable UTF-8 text
// without a space at either end.
func badText(s string) string {
	if !utf8.ValidString(s) {
		return "not valid UTF-8"
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return fmt.Sprintf("control character %U at byte %d (want printable text)", r, i)
		}
	}
	if strings.TrimSpace(s) == "" {
		return "only white space"
	}
	if s[0] == ' ' || s[len(s)-1] == ' ' {
		return "starts or ends with a space (an HTTP header would drop it)"
	}
	return ""
}

// quote is s in Go quotes, cut to about 80 bytes, for an error message.
func quote(s string) string {
	if len(s) > 80 {
		n := 80
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		return fmt.Sprintf("%q…", s[:n])
	}
	return fmt.Sprintf("%q", s)
}

// unknownDownstreamError reads `queue: unknown downstream "x"` and is
// ErrUnknownDownstream (shaping.ErrUnknownDownstream, whose own message
// has shaping's prefix).
type unknownDownstreamError string

func (e unknownDownstreamError) Error() string {
	return fmt.Sprintf("queue: unknown downstream %q", string(e))
}

func (e unknownDownstreamError) Unwrap() error { return ErrUnknownDownstream }
