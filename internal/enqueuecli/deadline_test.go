package enqueuecli

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// --ttl and --deadline reach the task; --json reports the one task's
// expected start; a task refused as late (on_late: reject) is an error
// line on stderr, counted as late, exit code 1.
func TestMainDeadline(t *testing.T) {
	t.Parallel()
	_, raw := cliOn(t, `  - name: api
    rate: 10/s
    on_late: reject
    handler: {type: log}
`)
	run := jsonRun(t, raw)
	before := time.Now()
	code, s, _ := run("", "--downstream", "api", "--payload", "1", "--ttl", "10s")
	if code != ExitOK || s.ExpectedStart == nil || s.ExpectedStart.Before(before.Add(-time.Second)) || s.ExpectedStart.After(time.Now().Add(time.Second)) {
		t.Fatalf("first task: exit %d, summary %+v; want 0 with an expected start about now", code, s)
	}
	var lines strings.Builder
	for i := range 29 {
		fmt.Fprintf(&lines, `{"downstream":"api","payload":%d}`+"\n", i)
	}
	lines.WriteString(`{"downstream":"api","payload":"late","ttl":"1s"}` + "\n")
	code, s, stderr := run(lines.String())
	if code != ExitRejected || s.Late != 1 || s.Accepted != 29 {
		t.Errorf("exit %d, summary %+v; want 1 with 29 accepted and 1 late", code, s)
	}
	if !strings.Contains(stderr, "stdin:30: refused: predicted start") || !strings.Contains(stderr, "past the deadline") {
		t.Errorf("stderr %q, want the late line named and why", stderr)
	}
	code, _, stderr = run("", "--downstream", "api", "--payload", "1", "--deadline", time.Now().Add(time.Hour).Format(time.RFC3339))
	if code != ExitOK {
		t.Errorf("a task with an hour to spare: exit %d (%s), want 0", code, stderr)
	}
	if code, _, stderr = run("", "--downstream", "api", "--payload", "1", "--ttl", "1s", "--deadline", "1767366000"); code != ExitBadInput || !strings.Contains(stderr, "not both") {
		t.Errorf("--ttl with --deadline: exit %d, stderr %q; want 2, not both", code, stderr)
	}
}
