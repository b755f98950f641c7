package taskspec_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/priority"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/taskspec"
)

// FuzzParse: the task reader behind the HTTP enqueue body and every JSON
// Lines line of the CLI. Any bytes give a task that validates, or an
// ErrInvalid whose message is one line; never a panic.
func FuzzParse(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(parseInput)
}

var parseSeeds = []string{
	`{"downstream":"api","payload":{"a":1},"key":"t1","cost":2}`,
	`{"downstream":"api","payload_base64":"aGk=","in":"5s","unique":"u-1"}`,
	`{"downstream":"api","at":"2026-12-01T00:00:00Z","max_retry":0,"timeout":"30s","type":"x"}`,
	`{"downstream":"api","priority":1}`, `{"downstream":"api","priority":0}`,
	`{"downstream":"api","collapse_key":"sync-7"}`, `{"downstream":"api","collapse_key":"a\tb"}`,
	`{"downstream":"a b","cost":-1}`,
	`{"payload":`, `[]`, `null`, `{"downstream":"api","extra":1}`, "{\"key\":\"\u2028\"}",
}

// TestParseMutations runs FuzzParse's body on 3000 mutations of its
// corpus, as `go test -fuzz FuzzParse -fuzztime 3000x` would, in the normal
// test run (see redistest.Mutations).
func TestParseMutations(t *testing.T) {
	var seeds [][]any
	for _, s := range parseSeeds {
		seeds = append(seeds, []any{[]byte(s)})
	}
	redistest.EachMutation(t, "FuzzParse", 1, 3000, seeds, func(in []any) { parseInput(t, in[0].([]byte)) })
}

// parseInput is FuzzParse's body.
func parseInput(t *testing.T, data []byte) {
	spec, err := taskspec.Parse(data)
	if err != nil {
		if !errors.Is(err, taskspec.ErrInvalid) {
			t.Fatalf("error %v does not wrap ErrInvalid", err)
		}
		if strings.ContainsAny(err.Error(), "\n\r") {
			t.Fatalf("error is not one line: %q", err.Error())
		}
		return
	}
	task, err := spec.Task(time.Now())
	if err != nil && strings.ContainsAny(err.Error(), "\n\r") {
		t.Fatalf("task error is not one line: %q", err.Error())
	}
	if err == nil && task.Cost < 0 {
		t.Fatalf("accepted a negative cost: %+v", task)
	}
	if err == nil && task.CollapseKey != "" && taskspec.CheckCollapseKey(task.CollapseKey) != "" {
		t.Fatalf("accepted collapse key %q: %s", task.CollapseKey, taskspec.CheckCollapseKey(task.CollapseKey))
	}
	if err == nil && task.Priority != 0 && (task.Priority < priority.First || task.Priority > priority.Last) {
		t.Fatalf("accepted priority %d: %+v", task.Priority, task)
	}
}
