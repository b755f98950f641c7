package shaping_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/shaping"
)

// asynqVersion is the asynq release whose storage shaper's take engine
// reads and writes (key layout, TaskMessage, the finishing scripts).
const asynqVersion = "v0.26.0"

// The module pins asynq to asynqVersion: another version may lay out its
// keys or its TaskMessage differently (asynqmsg.TestMessageLayout and the keys
// tests check the layout itself), so a change of version must be a
// decision, made here.
func TestAsynqVersionPinned(t *testing.T) {
	mod, err := os.ReadFile("../go.mod")
	must(t, err)
	var got []string
	for _, line := range strings.Split(string(mod), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "github.com/hibiken/asynq" || len(f) >= 3 && f[1] == "github.com/hibiken/asynq" {
			got = append(got, strings.TrimSpace(line))
		}
	}
	if len(got) != 1 || got[0] != "github.com/hibiken/asynq "+asynqVersion {
		t.Fatalf("go.mod has %q for asynq; shaper's take engine is written against %s (no replace): check the key layout, the TaskMessage and the finishing scripts, then change asynqVersion", got, asynqVersion)
	}
}

// A dispatcher serves tasks that asynq's own Client enqueued, and asynq's
// Inspector sees each in its real state: pending before the start, active
// in its call, retry (with the attempt, the error and a next time) after
// a failure, archived once MaxRetry is spent, completed with a retention,
// scheduled until its ProcessIn and then delivered; a unique task's lock
// is released when it is done; Timeout bounds the call's context; the
// daily processed and failed counters count every outcome.
func TestAsynqCompatibility(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	q := prefix + ":api"
	cl := asynq.NewClientFromRedisClient(rdb)
	in := asynq.NewInspectorFromRedisClient(rdb)
	enq := func(typ string, opts ...asynq.Option) string {
		t.Helper()
		info, err := cl.Enqueue(asynq.NewTask(typ, []byte(typ)), append([]asynq.Option{asynq.Queue(q)}, opts...)...)
		if err != nil {
			t.Fatalf("enqueue %s: %v", typ, err)
		}
		return info.ID
	}
	ids := map[string]string{
		"ok":      enq("ok"),
		"fails":   enq("fails", asynq.MaxRetry(3)),
		"spent":   enq("spent", asynq.MaxRetry(0)),
		"kept":    enq("kept", asynq.Retention(time.Hour)),
		"unique":  enq("unique", asynq.Unique(time.Hour)),
		"timeout": enq("timeout", asynq.Timeout(time.Second), asynq.MaxRetry(0)),
		"later":   enq("later", asynq.ProcessIn(time.Second)),
		"slow":    enq("slow"),
	}
	var laterDue time.Time // its second in asynq's scheduled set
	for name, id := range ids {
		want := asynq.TaskStatePending
		if name == "later" {
			want = asynq.TaskStateScheduled
		}
		info, err := in.GetTaskInfo(q, id)
		if err != nil || info.State != want {
			t.Fatalf("%s before the start: %v, %v; want %v", name, info, err, want)
		}
		if name == "later" {
			laterDue = info.NextProcessAt
		}
	}

	var mu sync.Mutex
	called := map[string]time.Time{}
	timeoutLeft := make(chan time.Duration, 1)
	inSlow, releaseSlow := make(chan struct{}), make(chan struct{})
	handler := func(ctx context.Context, task *shaping.Task) error {
		mu.Lock()
		called[task.Type] = time.Now()
		mu.Unlock()
		switch task.Type {
		case "fails", "spent":
			return errors.New(task.Type + " failed")
		case "timeout":
			dl, _ := ctx.Deadline()
			timeoutLeft <- time.Until(dl)
			<-ctx.Done()
			return ctx.Err()
		case "slow":
			close(inSlow)
			<-releaseSlow
		}
		return nil
	}
	d := shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer d.Shutdown(context.Background())
	must(t, d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(20), Handler: handler}))
	must(t, d.Start())

	<-inSlow
	if info, err := in.GetTaskInfo(q, ids["slow"]); err != nil || info.State != asynq.TaskStateActive {
		t.Errorf("slow in its call: %v, %v; want active", info, err)
	}
	close(releaseSlow)
	select {
	case left := <-timeoutLeft:
		if left > time.Second || left < 500*time.Millisecond {
			t.Errorf("timeout task's context had %v left at the call, want about its Timeout of 1s", left)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the timeout task was not called")
	}
	waitFor(t, 15*time.Second, "every task finished", func() bool {
		qi, err := in.GetQueueInfo(q)
		return err == nil && qi.Pending+qi.Active+qi.Scheduled == 0 && qi.Retry == 1 && qi.Archived == 2
	})

	state := func(name string) *asynq.TaskInfo {
		t.Helper()
		info, err := in.GetTaskInfo(q, ids[name])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return info
	}
	if info := state("fails"); info.State != asynq.TaskStateRetry || info.Retried != 1 || info.LastErr != "fails failed" ||
		info.LastFailedAt.IsZero() || !info.NextProcessAt.After(time.Now()) {
		t.Errorf("fails: %v retried %d err %q next %v, want retry, 1, its error, a next time ahead", info.State, info.Retried, info.LastErr, info.NextProcessAt)
	}
	if info := state("spent"); info.State != asynq.TaskStateArchived || info.LastErr != "spent failed" {
		t.Errorf("spent: %v err %q, want archived with its error", info.State, info.LastErr)
	}
	if info := state("timeout"); info.State != asynq.TaskStateArchived || info.LastErr == "" {
		t.Errorf("timeout: %v err %q, want archived with the deadline's error", info.State, info.LastErr)
	}
	if info := state("kept"); info.State != asynq.TaskStateCompleted || info.CompletedAt.IsZero() {
		t.Errorf("kept: %v completed at %v, want completed with its time", info.State, info.CompletedAt)
	}
	if _, err := in.GetTaskInfo(q, ids["ok"]); !errors.Is(err, asynq.ErrTaskNotFound) {
		t.Errorf("ok (no retention): %v, want removed once done", err)
	}
	if _, err := cl.Enqueue(asynq.NewTask("unique", []byte("unique")), asynq.Queue(q), asynq.Unique(time.Hour)); err != nil {
		t.Errorf("unique: the lock was not released when the task was done: %v", err)
	}
	mu.Lock()
	// asynq keeps a ProcessAt in whole seconds, truncated, and forwards a
	// task once its second has come (as asynq's own forwarder does)
	if at := called["later"]; at.Before(laterDue) {
		t.Errorf("later (ProcessIn 1s) called at %v, before its second %v in asynq's scheduled set", at, laterDue)
	}
	mu.Unlock()
	// processed counts every attempt that ended (asynq's rule), failed the
	// failed ones: ok, fails, spent, kept, unique, timeout, later, slow
	qi, err := in.GetQueueInfo(q)
	must(t, err)
	if qi.Processed != 8 || qi.Failed != 3 {
		t.Errorf("daily counters: processed %d failed %d, want 8 and 3", qi.Processed, qi.Failed)
	}
}
