// Package envelope is the wire format shaper adds to an asynq task: a few
// task headers beside the user's untouched payload, so the same task shows
// plainly in asynq's own tools and a task enqueued by plain asynq (no
// headers) is still served, with cost 1.
package envelope

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Header names.
const (
	HeaderCost     = "shaper-cost"      // units this task occupies in its bucket (default 1)
	HeaderKey      = "shaper-key"       // admission key (tenant, API key, …)
	HeaderMaxRetry = "shaper-max-retry" // the producer's retry budget (see CrashAllowance)
	HeaderDeadline = "shaper-deadline"  // RFC 3339 time after which the task must not start
	HeaderRowID    = "shaper-id"        // a batched task's ID, carried into its batch's row
)

// CrashAllowance is added to the producer's MaxRetry when the task is
// handed to asynq. asynq archives a task whose Retried >= MaxRetry before it
// asks whether the error was a failure, and its recoverer does the same for
// a task whose worker died; so a MaxRetry(0) task would be archived by a
// crash. shaper enforces the producer's budget itself (against handler
// failures only) and gives asynq this much headroom for crashes.
const CrashAllowance = 5

// ErrMalformed: a header is present but unreadable.
var ErrMalformed = errors.New("envelope: malformed task")

// Meta is what the headers carry.
type Meta struct {
	Cost     int64
	Key      string
	MaxRetry int // -1: not set (task from plain asynq)
	// Deadline is the latest time the task may start (be handed to its
	// handler); past it the task is archived unsent. Zero: none.
	Deadline time.Time
}

// Headers encodes m.
func (m Meta) Headers() map[string]string {
	h := map[string]string{HeaderCost: strconv.FormatInt(m.Cost, 10)}
	if m.Key != "" {
		h[HeaderKey] = m.Key
	}
	if m.MaxRetry >= 0 {
		h[HeaderMaxRetry] = strconv.Itoa(m.MaxRetry)
	}
	if !m.Deadline.IsZero() {
		h[HeaderDeadline] = m.Deadline.UTC().Format(time.RFC3339Nano)
	}
	return h
}

// Decode reads the headers; missing ones take defaults (cost 1, no key,
// MaxRetry -1, no deadline). Bad values are an ErrMalformed naming the header.
func Decode(h map[string]string) (Meta, error) {
	m := Meta{Cost: 1, MaxRetry: -1, Key: h[HeaderKey]}
	if s, ok := h[HeaderCost]; ok {
		c, err := strconv.ParseInt(s, 10, 64)
		if err != nil || c < 1 {
			return m, fmt.Errorf("%w: header %s = %q, want an integer >= 1", ErrMalformed, HeaderCost, s)
		}
		m.Cost = c
	}
	if s, ok := h[HeaderMaxRetry]; ok {
		r, err := strconv.Atoi(s)
		if err != nil || r < 0 {
			return m, fmt.Errorf("%w: header %s = %q, want an integer >= 0", ErrMalformed, HeaderMaxRetry, s)
		}
		m.MaxRetry = r
	}
	if s, ok := h[HeaderDeadline]; ok {
		d, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return m, fmt.Errorf("%w: header %s = %q, want an RFC 3339 time", ErrMalformed, HeaderDeadline, s)
		}
		m.Deadline = d
	}
	return m, nil
}
