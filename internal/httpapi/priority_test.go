package httpapi_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/shaper-io/shaper/internal/keys"
)

// A task's "priority" reaches the producer and the 202 says the priority
// it waits at; a downstream that serves no priorities answers 400 to any
// but 3, naming the field, the value and the downstream.
func TestPriority(t *testing.T) {
	t.Parallel()
	b := setup(t, options{priority: map[string]int{"api": 0, "global": 4}})
	for i, c := range []struct {
		path, body string
		want       float64
	}{
		{"/v1/downstreams/api/tasks", `{"payload":1,"priority":1,"unique":"p1"}`, 1},
		{"/v1/tasks", `{"downstream":"api","payload":1,"priority":5}`, 5},
		{"/v1/downstreams/api/tasks", `{"payload":1}`, 3},    // api's default: none, so 3
		{"/v1/downstreams/global/tasks", `{"payload":1}`, 4}, // global's default
		{"/v1/downstreams/open/tasks", `{"payload":1}`, 3},   // serves none
		{"/v1/downstreams/open/tasks", `{"payload":1,"priority":3}`, 3},
	} {
		r := b.post(t, c.path, c.body)
		if r.status != 202 || r.body["priority"] != c.want {
			t.Errorf("case %d: POST %s %s: %d %s, want 202 with priority %v", i, c.path, c.body, r.status, r.raw, c.want)
		}
	}
	ids, err := b.rdb.LRange(context.Background(), keys.New(b.prefix).TakePriority("api", 1), 0, -1).Result()
	if err != nil || !slices.Equal(ids, []string{"p1"}) {
		t.Errorf("api's priority 1 list = %v (%v), want [p1]", ids, err)
	}
	if r := b.do(t, "GET", "/v1/downstreams/api/tasks/p1", nil); r.status != 200 || r.body["state"] != "pending" {
		t.Errorf("GET the priority 1 task: %d %s, want 200 pending", r.status, r.raw)
	}

	for i, c := range []struct{ path, body, want string }{
		{"/v1/downstreams/open/tasks", `{"payload":1,"priority":2}`, `priority 2: downstream "open" serves no priorities`},
		{"/v1/tasks", `{"downstream":"open","payload":1,"priority":1}`, `priority 1: downstream "open" serves no priorities`},
		{"/v1/downstreams/api/tasks", `{"payload":1,"priority":9}`, "priority: must be an integer from 1 (first) to 5 (last), got 9"},
		{"/v1/downstreams/api/tasks", `{"payload":1,"priority":0}`, "priority: must be an integer from 1 (first) to 5 (last), got 0"},
		{"/v1/downstreams/api/tasks", `{"payload":1,"priority":"high"}`, `priority: must be an integer from 1 (first) to 5 (last), got the string "high"`},
	} {
		r := b.post(t, c.path, c.body)
		msg, _ := r.body["error"].(string)
		if r.status != 400 || !strings.HasPrefix(msg, c.want) {
			t.Errorf("case %d: POST %s %s: %d %s, want 400 with an error starting %q", i, c.path, c.body, r.status, r.raw, c.want)
		}
	}
	if n := b.total(t, "open"); n != 2 {
		t.Errorf("open holds %d tasks, want 2 (the refused ones not enqueued)", n)
	}
}
