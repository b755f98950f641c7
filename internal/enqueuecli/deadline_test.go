package enqueuecli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/redistest"
)

// --ttl and --deadline reach the task; --json reports the one task's
// expected start; a task refused as late (on_late: reject) is an error
// line on stderr, counted as late, exit code 1.
func TestMainDeadline(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	cfg := filepath.Join(t.TempDir(), "shaper.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
redis: {url: %q, prefix: %q}
http: {listen: off}
downstreams:
  - name: api
    rate: 10/s
    on_late: reject
    handler: {type: log}
`, redistest.URL(t), prefix)), 0o600)
	run := func(stdin string, args ...string) (int, Summary, string) {
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), append([]string{"--config", cfg, "--json", "--progress", "never"}, args...),
			IO{Stdin: strings.NewReader(stdin), Stdout: &stdout, Stderr: &stderr})
		var s Summary
		if stdout.Len() == 0 && code == ExitBadInput {
			return code, s, stderr.String() // a usage error: no summary
		}
		if err := json.Unmarshal(stdout.Bytes(), &s); err != nil {
			t.Fatalf("summary: %v: %q", err, stdout.String())
		}
		return code, s, stderr.String()
	}
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
