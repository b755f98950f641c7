// Package session runs examples/enqueue-session/session.sh, the shell
// session with the enqueue CLI, against a real Redis.
package session_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/queue"
)

var enqueueBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "enqueue-session-")
	if err != nil {
		panic(err)
	}
	enqueueBin = filepath.Join(dir, "enqueue")
	if out, err := exec.Command("go", "build", "-o", enqueueBin, "../../cmd/enqueue").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build ./cmd/enqueue: %v\n%s", err, out)
		os.Exit(1)
	}
	redistest.Main(m)
}

var exitLine = regexp.MustCompile(`(?m)^exit (\d+)$`)

// The session runs as written: each step exits with the code its comment
// promises, the JSON summary counts 5 accepted and 15 rejected, and the
// queue holds what the session put there.
func TestSession(t *testing.T) {
	prefix := redistest.Prefix(t)
	cmd := exec.Command("bash", "session.sh")
	cmd.Env = append(os.Environ(), "ENQUEUE="+enqueueBin, "REDIS_URL="+redistest.URL(t), "PREFIX="+prefix, "TMPDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("session.sh: %v\n%s", err, out)
	}
	var codes []string
	for _, m := range exitLine.FindAllStringSubmatch(string(out), -1) {
		codes = append(codes, m[1])
	}
	// dry run, one task, later, unique, duplicate, JSON Lines, bad line.
	if want := []string{"0", "0", "0", "0", "4", "1", "2"}; !slices.Equal(codes, want) {
		t.Errorf("exit codes %v, want %v\n%s", codes, want, out)
	}
	start := strings.Index(string(out), "{\n")
	end := strings.Index(string(out), "\n}\n")
	if start < 0 || end < start {
		t.Fatalf("no JSON summary in the session's output:\n%s", out)
	}
	var sum struct {
		Tasks, Accepted, Rejected, Deferred int
		FirstRetryAfter                     *float64 `json:"first_retry_after"`
	}
	if err := json.Unmarshal(out[start:end+2], &sum); err != nil {
		t.Fatalf("JSON summary: %v", err)
	}
	if sum.Tasks != 20 || sum.Accepted != 5 || sum.Rejected != 15 || sum.Deferred != 0 || sum.FirstRetryAfter == nil || *sum.FirstRetryAfter <= 0 {
		t.Errorf("summary %+v, want 20 tasks: 5 accepted, 15 rejected with a Retry-After", sum)
	}
	if !strings.Contains(string(out), "cost: must not be negative") {
		t.Errorf("the bad line is not named on stderr:\n%s", out)
	}
	b, err := queue.NewInspector(redistest.Client(t), prefix).Backlog("reports")
	if err != nil {
		t.Fatal(err)
	}
	// Pending: step 2, the unique task, 5 of tenant-b, the good line of
	// step 6. Scheduled: step 3. The dry run enqueued nothing.
	if b.Pending != 8 || b.Scheduled != 1 {
		t.Errorf("backlog pending %d scheduled %d, want 8 and 1", b.Pending, b.Scheduled)
	}
}
