package httpapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
)

// A 202 says when the task is expected to start; a task whose deadline
// comes before that, on a downstream with on_late: reject, gets 422 and is
// not enqueued.
func TestDeadlineExpectedStartAndLate(t *testing.T) {
	t.Parallel()
	b := setup(t, options{shaping: map[string]queue.Shaping{"api": {Rate: limiters.PerSecond(10), OnLate: queue.LateReject}}})
	before := time.Now()
	r := b.post(t, "/v1/downstreams/api/tasks", `{"payload":1,"ttl":"10s"}`)
	if r.status != 202 {
		t.Fatalf("first task: %d %s", r.status, r.raw)
	}
	es, err := time.Parse(time.RFC3339Nano, r.body["expected_start"].(string))
	if err != nil || es.Before(before.Add(-time.Second)) || es.After(time.Now().Add(time.Second)) {
		t.Errorf("expected_start = %v (%v), want about now (an empty queue)", r.body["expected_start"], err)
	}
	for range 29 {
		if r := b.post(t, "/v1/downstreams/api/tasks", `{"payload":1}`); r.status != 202 {
			t.Fatalf("filler: %d %s", r.status, r.raw)
		}
	}
	// 30 tasks ahead at 10/s: about 3s.
	r = b.post(t, "/v1/downstreams/api/tasks", `{"payload":1,"ttl":"1s"}`)
	if r.status != 422 {
		t.Fatalf("late task: %d %s, want 422", r.status, r.raw)
	}
	msg, _ := r.body["error"].(string)
	if !strings.Contains(msg, "past the deadline") || r.body["expected_start"] == nil || r.body["deadline"] == nil {
		t.Errorf("422 body %s, want the error, deadline and expected_start", r.raw)
	}
	es, _ = time.Parse(time.RFC3339Nano, r.body["expected_start"].(string))
	if w := es.Sub(before); w < 2500*time.Millisecond || w > 4*time.Second {
		t.Errorf("predicted wait %s, want about 3s (30 pending at 10/s)", w)
	}
	if n := b.total(t, "api"); n != 30 {
		t.Errorf("%d tasks queued, want 30 (the late one not enqueued)", n)
	}
	if r := b.post(t, "/v1/downstreams/api/tasks", `{"payload":1,"ttl":"1m"}`); r.status != 202 {
		t.Errorf("a task with time to spare: %d %s, want 202", r.status, r.raw)
	}
}
