package enqueuecli

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/redistest"
)

// --collapse-key and the lines' "collapse_key" reach the producer: on a
// keep_last downstream a second task with a waiting task's key is
// collapsed into it (its payload replaces the waiting one's), counts as
// done (exit 0) and the output says into which id; on a downstream
// without collapse the key changes nothing.
func TestMainCollapse(t *testing.T) {
	t.Parallel()
	prefix, run := cliOn(t, `  - name: api
    rate: 10/s
    collapse: keep_last
    handler: {type: log}
  - name: plain
    rate: 10/s
    handler: {type: log}
`)
	summary := func(stdout string) Summary { t.Helper(); return summaryOf(t, ExitOK, stdout) }

	// One task, then a second with its key: collapsed into the first.
	code, stdout, stderr := run("", "--json", "--downstream", "api", "--payload", "v1", "--collapse-key", "k1")
	first := summary(stdout)
	if code != ExitOK || first.Accepted != 1 || first.Collapsed != 0 || first.ID == "" || first.CollapsedInto != "" {
		t.Fatalf("first task: exit %d, summary %+v, stderr %q; want exit 0, 1 accepted with an id", code, first, stderr)
	}
	code, stdout, stderr = run("", "--json", "--downstream", "api", "--payload", "v2", "--collapse-key", "k1")
	s := summary(stdout)
	if code != ExitOK || s.ExitCode != ExitOK || s.Tasks != 1 || s.Collapsed != 1 || s.Accepted != 0 || s.Enqueued != 0 ||
		s.ID != first.ID || s.CollapsedInto != first.ID || s.ProcessAt != nil {
		t.Errorf("second task: exit %d, summary %+v, stderr %q; want exit 0, 1 collapsed into %s", code, s, stderr, first.ID)
	}
	if !strings.Contains(stdout, `"collapsed_into": "`+first.ID+`"`) || !strings.Contains(stdout, `"collapsed": 1`) {
		t.Errorf("--json output %s; want collapsed 1 and collapsed_into %s", stdout, first.ID)
	}
	// Without --json: the waiting task's id on stdout, one line on stderr.
	code, stdout, stderr = run("", "--downstream", "api", "--payload", "v3", "--collapse-key", "k1")
	if want := fmt.Sprintf("enqueue: collapsed into %s: a task with collapse key \"k1\" still waits\n", first.ID); code != ExitOK || stdout != first.ID+"\n" || stderr != want {
		t.Errorf("third task: exit %d, stdout %q, stderr %q; want 0, %q and %q", code, stdout, stderr, first.ID+"\n", want)
	}

	// JSON Lines: the lines' own keys, and --collapse-key for lines
	// without one.
	lines := strings.Join([]string{
		`{"payload":"l1","collapse_key":"k2"}`,
		`{"payload":"l2","collapse_key":"k2"}`,
	}, "\n")
	code, _, stderr = run(lines, "--downstream", "api")
	if code != ExitOK || !strings.HasPrefix(stderr, "enqueue: 2 tasks in ") ||
		!strings.HasSuffix(stderr, ": 1 accepted, 0 deferred, 0 rejected, 1 collapsed into a waiting task\n") {
		t.Errorf("lines with k2: exit %d, stderr %q; want exit 0 and a summary with 1 accepted, 1 collapsed into a waiting task", code, stderr)
	}
	lines = strings.Join([]string{`{"payload":"m1"}`, `{"payload":"m2"}`, `{"payload":"m3"}`}, "\n")
	code, _, stderr = run(lines, "--downstream", "api", "--collapse-key", "k3", "-v")
	if code != ExitOK || !strings.Contains(stderr, ": 1 accepted, 0 deferred, 0 rejected, 2 collapsed into waiting tasks\n") ||
		strings.Count(stderr, "enqueue: stdin:") != 3 || !strings.Contains(stderr, "enqueue: stdin:3: collapsed into ") {
		t.Errorf("lines with --collapse-key k3 -v: exit %d, stderr %q; want exit 0, a line per task and 2 collapsed into waiting tasks", code, stderr)
	}
	code, stdout, _ = run(lines, "--json", "--downstream", "api", "--collapse-key", "k3")
	if s := summary(stdout); code != ExitOK || s.Collapsed != 3 || s.Accepted != 0 || s.CollapsedInto != "" {
		t.Errorf("the k3 lines again: exit %d, summary %+v; want exit 0, all 3 collapsed", code, s)
	}

	// A downstream without collapse refuses a collapse key: bad input.
	code, _, stderr = run("", "--json", "--downstream", "plain", "--payload", "p", "--collapse-key", "k1")
	if code != ExitBadInput || !strings.Contains(stderr, `downstream "plain" collapses nothing`) {
		t.Errorf("plain: exit %d, stderr %q; want bad input naming the downstream", code, stderr)
	}

	// api holds one task per key, with the last payload given for it.
	in := asynq.NewInspectorFromRedisClient(redistest.Client(t))
	defer in.Close()
	space := keys.New(prefix)
	got := map[string]int{}
	for _, ds := range []string{"api"} {
		tasks, err := in.ListPendingTasks(space.Queue(ds))
		if err != nil {
			t.Fatal(err)
		}
		for _, ti := range tasks {
			got[ds+" "+string(ti.Payload)]++
		}
	}
	want := map[string]int{"api v3": 1, `api "l2"`: 1, `api "m3"`: 1}
	if !maps.Equal(got, want) {
		t.Errorf("pending tasks (downstream payload: count) %v, want %v", got, want)
	}
	if ti, err := in.GetTaskInfo(space.Queue("api"), first.ID); err != nil || string(ti.Payload) != "v3" {
		t.Errorf("the first task: %v %v, want it to hold the third task's payload v3", ti, err)
	}

	// A bad --collapse-key is bad input, named in one line.
	for i, c := range []struct{ key, want string }{
		{"", "enqueue: --collapse-key must not be empty (leave it out for a task that is never collapsed)\n"},
		{"a\nb", "enqueue: --collapse-key must be printable text, got \"a\\nb\" (control character U+000A at byte 1)\n"},
		{strings.Repeat("x", 1025), "enqueue: --collapse-key must be at most 1024 bytes, got 1025\n"},
	} {
		code, _, stderr := run("", "--downstream", "api", "--payload", "p", "--collapse-key", c.key)
		if code != ExitBadInput || stderr != c.want {
			t.Errorf("case %d: exit %d, stderr %q; want 2 and %q", i, code, stderr, c.want)
		}
	}
	code, _, stderr = run(`{"payload":1,"collapse_key":"a\u0007"}`, "--downstream", "api")
	if want := "enqueue: stdin:1: collapse_key: must be printable text, got \"a\\a\" (control character U+0007 at byte 1)\n"; code != ExitBadInput || !strings.HasPrefix(stderr, want) {
		t.Errorf("a line with a bad collapse_key: exit %d, stderr %q; want 2 and a line %q", code, stderr, want)
	}
}
