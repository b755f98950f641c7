package shaping_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/shaper-io/shaper/shaping"
)

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestClassifySteps(t *testing.T) {
	t.Parallel()
	fresh, spent := shaping.Budget{MaxRetry: 3}, shaping.Budget{Retried: 3, MaxRetry: 3}
	panicked := shaping.Call(context.Background(), func(context.Context, *shaping.Task) error { panic("boom") }, &shaping.Task{})
	for i, tt := range []struct {
		err      error
		b        shaping.Budget
		adaptive bool
		want     shaping.Action
		pause    time.Duration
		adapt    string
		outcome  string
	}{
		{nil, fresh, false, shaping.Complete, 0, "inc", "success"},
		{&shaping.ThrottledError{After: 3 * time.Second}, spent, false, shaping.Throttle, 3 * time.Second, "dec", "throttled"},
		{&shaping.ThrottledError{}, fresh, false, shaping.Throttle, time.Second, "dec", "throttled"},
		{&shaping.ThrottledError{}, fresh, true, shaping.Throttle, 0, "dec", "throttled"},
		{fmt.Errorf("wrapped: %w", &shaping.ThrottledError{After: time.Second}), fresh, false, shaping.Throttle, time.Second, "dec", "throttled"},
		{panicked, fresh, false, shaping.Archive, 0, "", "panic"},
		{shaping.Permanent(errors.New("400")), fresh, false, shaping.Archive, 0, "", "archived"},
		{fmt.Errorf("no: %w", asynq.SkipRetry), fresh, false, shaping.Archive, 0, "", "archived"},
		{timeoutErr{}, fresh, true, shaping.Retry, 0, "dec", "retry"},
		{timeoutErr{}, fresh, false, shaping.Retry, 0, "", "retry"},
		{timeoutErr{}, spent, true, shaping.Archive, 0, "", "archived"},
		{errors.New("500"), fresh, false, shaping.Retry, 0, "", "retry"},
		{errors.New("500"), spent, false, shaping.Archive, 0, "", "archived"},
		{errors.New("500"), shaping.Budget{Retried: 1000, MaxRetry: -1}, false, shaping.Retry, 0, "", "retry"},
	} {
		d := shaping.Classify(tt.err, tt.b, tt.adaptive)
		if d.Action != tt.want || d.Pause != tt.pause || d.Adapt != tt.adapt || d.Outcome != tt.outcome {
			t.Errorf("step %d: Classify(%v, %+v, %v) = %v pause %s adapt %q outcome %q; want %v pause %s adapt %q outcome %q",
				i, tt.err, tt.b, tt.adaptive, d.Action, d.Pause, d.Adapt, d.Outcome, tt.want, tt.pause, tt.adapt, tt.outcome)
		}
		if archived := errors.Is(d.Err, asynq.SkipRetry); archived != (d.Action == shaping.Archive) {
			t.Errorf("step %d: %v with err %v: SkipRetry %v, want it exactly for Archive", i, d.Action, d.Err, archived)
		}
		if (d.Err == nil) != (d.Action == shaping.Complete || d.Action == shaping.Throttle) {
			t.Errorf("step %d: %v with err %v: want an error exactly for Retry and Archive", i, d.Action, d.Err)
		}
	}
}

// Outage is the breaker's notion of an error: a 5xx, a timeout or a
// connection failure, whatever the budget; never a throttle, a 4xx, a
// permanent error or a panic.
func TestClassifyOutage(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, refused := http.Get("http://" + addr + "/") // nothing listens there now
	if refused == nil {
		t.Fatal("GET of a closed port succeeded")
	}
	fresh, spent := shaping.Budget{MaxRetry: 3}, shaping.Budget{Retried: 3, MaxRetry: 3}
	panicked := shaping.Call(context.Background(), func(context.Context, *shaping.Task) error { panic("boom") }, &shaping.Task{})
	for i, tt := range []struct {
		err    error
		b      shaping.Budget
		want   shaping.Action
		outage bool
	}{
		{&shaping.StatusError{Code: 500}, fresh, shaping.Retry, true},
		{fmt.Errorf("call: %w", &shaping.StatusError{Code: 502}), spent, shaping.Archive, true},
		{timeoutErr{}, fresh, shaping.Retry, true},
		{context.DeadlineExceeded, spent, shaping.Archive, true},
		{refused, fresh, shaping.Retry, true},
		{&shaping.StatusError{Code: 418}, fresh, shaping.Retry, false},
		{shaping.Permanent(&shaping.StatusError{Code: 500}), fresh, shaping.Archive, false},
		{shaping.Throttled(0, &shaping.StatusError{Code: 503}), fresh, shaping.Throttle, false},
		{errors.New("bad payload"), fresh, shaping.Retry, false},
		{context.Canceled, fresh, shaping.Retry, false},
		{panicked, fresh, shaping.Archive, false},
		{nil, fresh, shaping.Complete, false},
	} {
		for _, adaptive := range []bool{false, true} {
			d := shaping.Classify(tt.err, tt.b, adaptive)
			if d.Action != tt.want || d.Outage != tt.outage {
				t.Errorf("step %d (adaptive %v): Classify(%v) = %v outage %v; want %v outage %v", i, adaptive, tt.err, d.Action, d.Outage, tt.want, tt.outage)
			}
		}
	}
}
