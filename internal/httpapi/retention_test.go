package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/testutil"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/shaping"
)

// A task delivered is answered as completed, with its time, for the
// retention window (queue.DefaultRetention, 1h): a GET right after it
// completed finds it, not a 404.
func TestCompletedTaskAnswersCompleted(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	r := b.post(t, "/v1/downstreams/api/tasks", `{"payload":{"n":1}}`)
	if r.status != 202 {
		t.Fatalf("enqueue: %d %s", r.status, r.raw)
	}
	id, _ := r.body["id"].(string)
	d := shaping.New(b.rdb, shaping.Config{Prefix: b.prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(10),
		Handler: func(context.Context, *shaping.Task) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer d.Shutdown(context.Background())
	var got response
	testutil.WaitFor(t, 10*time.Second, "the task completed", func() bool {
		got = b.do(t, "GET", "/v1/downstreams/api/tasks/"+id, nil)
		return got.status == 200 && got.body["state"] == "completed"
	})
	if got.body["completed_at"] == nil {
		t.Errorf("completed task without completed_at: %s", got.raw)
	}
}

// DELETE on a waiting task cancels it: it is gone (404 after) and never
// delivered; an unknown one is 404.
func TestCancelWaitingTask(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	r := b.post(t, "/v1/downstreams/deferred/tasks", `{"payload":1,"in":"1h"}`)
	if r.status != 202 {
		t.Fatalf("enqueue: %d %s", r.status, r.raw)
	}
	id, _ := r.body["id"].(string)
	got := b.do(t, "DELETE", "/v1/downstreams/deferred/tasks/"+id, nil)
	if got.status != 200 || got.body["state"] != "scheduled" || got.body["id"] != id {
		t.Fatalf("DELETE: %d %s, want 200 with the state it was cancelled in", got.status, got.raw)
	}
	if got := b.do(t, "GET", "/v1/downstreams/deferred/tasks/"+id, nil); got.status != 404 {
		t.Errorf("GET after DELETE: %d %s, want 404", got.status, got.raw)
	}
	if got := b.do(t, "DELETE", "/v1/downstreams/deferred/tasks/"+id, nil); got.status != 404 {
		t.Errorf("second DELETE: %d %s, want 404", got.status, got.raw)
	}
}

// GET on a task says why it is where it is: a scheduled task is due at its
// time; a queued one waits at its priority.
func TestGetTaskExplains(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	r := b.post(t, "/v1/downstreams/deferred/tasks", `{"payload":1,"in":"1h"}`)
	id, _ := r.body["id"].(string)
	got := b.do(t, "GET", "/v1/downstreams/deferred/tasks/"+id, nil)
	ex, _ := got.body["explain"].(map[string]any)
	if got.status != 200 || ex["reason"] != "scheduled" || ex["due"] == nil || !strings.Contains(fmt.Sprint(ex["text"]), "due at") {
		t.Errorf("GET a scheduled task: %d %s, want explain.reason scheduled with its due time", got.status, got.raw)
	}
	r = b.post(t, "/v1/downstreams/deferred/tasks", `{"payload":2}`)
	id, _ = r.body["id"].(string)
	got = b.do(t, "GET", "/v1/downstreams/deferred/tasks/"+id, nil)
	ex, _ = got.body["explain"].(map[string]any)
	if ex["reason"] != "queued" || ex["priority"] != float64(3) {
		t.Errorf("GET a queued task: %s, want explain.reason queued at priority 3", got.raw)
	}
}

// GET and DELETE on /v1/tasks/{id} find the task in whichever downstream
// holds it; an unknown id is 404.
func TestTaskByIDAlone(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	r := b.post(t, "/v1/downstreams/deferred/tasks", `{"payload":1,"in":"1h"}`)
	id, _ := r.body["id"].(string)
	if got := b.do(t, "GET", "/v1/tasks/"+id, nil); got.status != 200 || got.body["downstream"] != "deferred" || got.body["state"] != "scheduled" {
		t.Errorf("GET /v1/tasks/%s: %d %s, want the deferred downstream's scheduled task", id, got.status, got.raw)
	}
	if got := b.do(t, "DELETE", "/v1/tasks/"+id, nil); got.status != 200 || got.body["state"] != "scheduled" {
		t.Errorf("DELETE /v1/tasks/%s: %d %s, want 200 scheduled", id, got.status, got.raw)
	}
	for _, m := range []string{"GET", "DELETE"} {
		if got := b.do(t, m, "/v1/tasks/"+id, nil); got.status != 404 {
			t.Errorf("%s after the cancel: %d %s, want 404", m, got.status, got.raw)
		}
	}
}
