package httpapi_test

import (
	"strings"
	"testing"

	"github.com/shaper-io/shaper/internal/httpapi"
	"github.com/shaper-io/shaper/queue"
)

// A task whose "collapse_key" a waiting task holds is collapsed into it:
// 200 (nothing new was enqueued) with the waiting task's id, its state and
// its Location. keep_last gives the waiting task the newcomer's payload,
// keep_first keeps its own; a downstream without collapse refuses a
// collapse key (400); a bad collapse_key is a 400 naming the field.
func TestCollapse(t *testing.T) {
	t.Parallel()
	b := setup(t, options{collapse: map[string]queue.Collapse{"api": {Mode: queue.KeepLast}, "global": {Mode: queue.KeepFirst}}})
	for _, c := range []struct{ ds, want string }{{"api", `{"v":3}`}, {"global", `{"v":1}`}} {
		first := b.post(t, "/v1/downstreams/"+c.ds+"/tasks", `{"payload":{"v":1},"collapse_key":"tenant-7"}`)
		id, _ := first.body["id"].(string)
		if first.status != 202 || id == "" {
			t.Fatalf("%s: the first task: %d %s, want 202 with an id", c.ds, first.status, first.raw)
		}
		for i, post := range []struct{ path, body string }{
			{"/v1/downstreams/" + c.ds + "/tasks", `{"payload":{"v":2},"collapse_key":"tenant-7"}`},
			{"/v1/tasks", `{"downstream":"` + c.ds + `","payload":{"v":3},"collapse_key":"tenant-7","key":"tenant-7"}`},
		} {
			r := b.post(t, post.path, post.body)
			loc := httpapi.TaskPath(c.ds, id)
			if r.status != 200 || r.body["id"] != id || r.body["collapsed_into"] != id || r.body["state"] != "pending" ||
				r.body["downstream"] != c.ds || r.body["queue"] != first.body["queue"] || r.body["location"] != loc || r.header.Get("Location") != loc {
				t.Errorf("%s: update %d: %d %s (Location %q); want 200 collapsed into %s, pending, at %s", c.ds, i, r.status, r.raw, r.header.Get("Location"), id, loc)
			}
		}
		info, err := b.in.Asynq().GetTaskInfo(first.body["queue"].(string), id)
		if err != nil || string(info.Payload) != c.want {
			t.Errorf("%s: the waiting task holds %v (%v), want payload %s", c.ds, info, err, c.want)
		}
		if n := b.total(t, c.ds); n != 1 {
			t.Errorf("%s holds %d tasks, want 1", c.ds, n)
		}
	}

	// The state is the waiting task's own; GET on the Location finds it.
	later := b.post(t, "/v1/downstreams/api/tasks", `{"payload":1,"collapse_key":"later","in":"1h"}`)
	r := b.post(t, "/v1/downstreams/api/tasks", `{"payload":2,"collapse_key":"later"}`)
	if later.status != 202 || r.status != 200 || r.body["id"] != later.body["id"] || r.body["state"] != "scheduled" {
		t.Errorf("into a scheduled task: %d %s then %d %s; want 202, then 200 with the same id, scheduled", later.status, later.raw, r.status, r.raw)
	}
	if g := b.do(t, "GET", r.header.Get("Location"), nil); g.status != 200 || g.body["id"] != later.body["id"] || g.body["state"] != "scheduled" {
		t.Errorf("GET the 200's Location: %d %s, want the scheduled task", g.status, g.raw)
	}

	// Without collapse, a collapse key is refused and nothing enqueued.
	if r := b.post(t, "/v1/downstreams/open/tasks", `{"payload":1,"collapse_key":"tenant-7"}`); r.status != 400 ||
		!strings.Contains(r.raw, `downstream \"open\" collapses nothing`) {
		t.Errorf("open: %d %s, want 400 naming the downstream", r.status, r.raw)
	}
	if n := b.total(t, "open"); n != 0 {
		t.Errorf("open: %d tasks, want none", n)
	}

	for i, c := range []struct{ body, want string }{
		{`{"payload":1,"collapse_key":""}`, "collapse_key: must not be empty (leave it out for a task that is never collapsed)"},
		{`{"payload":1,"collapse_key":"a\nb"}`, `collapse_key: must be printable text, got "a\nb" (control character U+000A at byte 1)`},
		{`{"payload":1,"collapse_key":"` + strings.Repeat("k", 1025) + `"}`, "collapse_key: must be at most 1024 bytes, got 1025"},
		{`{"payload":1,"collapse_key":7}`, "collapse_key: got the number 7, want a string"},
	} {
		r := b.post(t, "/v1/downstreams/api/tasks", c.body)
		if r.status != 400 || r.body["error"] != c.want {
			t.Errorf("case %d: %d %s, want 400 %q", i, r.status, r.raw, c.want)
		}
	}
	if n := b.total(t, "api"); n != 2 {
		t.Errorf("api holds %d tasks, want 2 (tenant-7's and later's)", n)
	}
}
