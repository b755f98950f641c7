package enqueuecli

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/redistest"
)

// --priority and the lines' "priority" reach the producer: each task waits
// at its own priority, else --priority's, else the downstream's
// priority.default; the one task's summary says which. A priority the
// downstream does not serve, or 0 in a line, is bad input naming the
// field and the value.
func TestMainPriority(t *testing.T) {
	t.Parallel()
	prefix, raw := cliOn(t, `  - name: api
    rate: 10/s
    priority: {default: 2}
    handler: {type: log}
  - name: plain
    rate: 10/s
    handler: {type: log}
`)
	run := jsonRun(t, raw)

	for i, c := range []struct {
		args []string
		want int
	}{
		{[]string{"--downstream", "api"}, 2}, // the downstream's default
		{[]string{"--downstream", "api", "--priority", "1"}, 1},
		{[]string{"--downstream", "api", "--priority", "0"}, 2},
		{[]string{"--downstream", "plain"}, 3},
		{[]string{"--downstream", "plain", "--priority", "3"}, 3},
	} {
		code, s, stderr := run("", append(c.args, "--payload", "1")...)
		if code != ExitOK || s.Accepted != 1 || s.Priority != c.want {
			t.Errorf("case %d %v: exit %d, priority %d, stderr %q; want exit 0 at priority %d", i, c.args, code, s.Priority, stderr, c.want)
		}
	}
	code, s, stderr := run("", "--downstream", "plain", "--priority", "2", "--payload", "1")
	if want := `enqueue: priority 2: downstream "plain" serves no priorities`; code != ExitBadInput || s.Invalid != 1 || !strings.HasPrefix(stderr, want) {
		t.Errorf("priority 2 on plain: exit %d, summary %+v, stderr %q; want exit 2 and %q", code, s, stderr, want)
	}

	lines := strings.Join([]string{
		`{"downstream":"api","unique":"a","priority":1}`,
		`{"downstream":"api","unique":"b"}`,
		`{"downstream":"api","unique":"c","priority":5}`,
		`{"downstream":"api","unique":"d","priority":0}`,
		`{"downstream":"plain","unique":"e","priority":2}`,
		`{"downstream":"plain","unique":"f","priority":3}`,
		`{"downstream":"api","unique":"g","priority":"1"}`,
	}, "\n")
	code, s, stderr = run(lines, "--priority", "4")
	if code != ExitBadInput || s.Accepted != 4 || s.Invalid != 3 {
		t.Errorf("JSON Lines: exit %d, summary %+v; want exit 2, 4 accepted, 3 invalid", code, s)
	}
	for _, want := range []string{
		"enqueue: stdin:4: priority: must be an integer from 1 (first) to 5 (last), got 0 (leave it out for the downstream's default)\n",
		"enqueue: stdin:5: priority 2: downstream \"plain\" serves no priorities",
		"enqueue: stdin:7: priority: must be an integer from 1 (first) to 5 (last), got the string \"1\"\n",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q, want a line containing %q", stderr, want)
		}
	}
	// The single tasks above wait on these lists too; each line's task is
	// on its own priority's list and on no other.
	rdb := redistest.Client(t)
	space := keys.New(prefix)
	lists := map[int][]string{}
	for _, p := range []int{1, 2, 4, 5} {
		ids, err := rdb.LRange(context.Background(), space.TakePriority("api", p), 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		lists[p] = ids
	}
	for id, want := range map[string]int{"a": 1, "b": 4, "c": 5} {
		for p, ids := range lists {
			if slices.Contains(ids, id) != (p == want) {
				t.Errorf("task %s: api's priority %d list is %v; want it on priority %d's only", id, p, ids, want)
			}
		}
	}
}
