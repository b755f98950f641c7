package envelope

import (
	"errors"
	"testing"
	"time"
)

func TestDeadlineHeader(t *testing.T) {
	d := time.Date(2026, 1, 2, 15, 4, 5, 123456789, time.UTC)
	h := Meta{Cost: 2, Key: "k", MaxRetry: 3, Deadline: d}.Headers()
	if h[HeaderDeadline] != "2026-01-02T15:04:05.123456789Z" {
		t.Errorf("header %s = %q", HeaderDeadline, h[HeaderDeadline])
	}
	m, err := Decode(h)
	if err != nil || !m.Deadline.Equal(d) || m.Cost != 2 {
		t.Errorf("Decode = %+v, %v; want the deadline back", m, err)
	}
	if _, ok := (Meta{Cost: 1}).Headers()[HeaderDeadline]; ok {
		t.Error("a task without a deadline carries the header")
	}
	if m, err := Decode(map[string]string{}); err != nil || !m.Deadline.IsZero() {
		t.Errorf("no headers: %+v, %v; want no deadline", m, err)
	}
	if _, err := Decode(map[string]string{HeaderDeadline: "soon"}); !errors.Is(err, ErrMalformed) {
		t.Errorf("a bad deadline: %v, want ErrMalformed", err)
	}
}
