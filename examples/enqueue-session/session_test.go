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

// session runs session.sh with the built enqueue (and a stand-in for
// shaper, which the session only names) on the test's Redis, in a work
// directory of its own.
func session(t *testing.T, prefix string, args ...string) (out []byte, work string, err error) {
	t.Helper()
	work = t.TempDir()
	cmd := exec.Command("bash", append([]string{"session.sh"}, args...)...)
	cmd.Env = append(os.Environ(), "ENQUEUE="+enqueueBin, "SHAPER=shaper", "REDIS_URL="+redistest.URL(t),
		"PREFIX="+prefix, "WORK="+work, "TMPDIR="+t.TempDir())
	out, err = cmd.CombinedOutput()
	cfg, rerr := os.ReadFile(filepath.Join(work, "shaper.yaml"))
	if rerr != nil || !strings.Contains(string(cfg), "url: "+redistest.URL(t)+"\n") || !strings.Contains(string(cfg), "prefix: "+prefix+"\n") {
		t.Errorf("session.sh's config does not hold REDIS_URL and PREFIX: %v\n%s", rerr, cfg)
	}
	return out, work, err
}

var exitLine = regexp.MustCompile(`(?m)^exit (\d+)$`)

// The session runs as written: each step exits with the code its comment
// promises, the JSON summary counts 5 accepted and 15 rejected, and the
// queue holds what the session put there.
func TestSession(t *testing.T) {
	prefix := redistest.Prefix(t)
	out, work, err := session(t, prefix)
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
	if !strings.Contains(string(out), "-config "+filepath.Join(work, "shaper.yaml")) {
		t.Errorf("the shaper command for the same config is not printed:\n%s", out)
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

// session.sh --dry-run prints every command it would run, with the same
// config, and runs none: no exit lines, nothing in the queue.
func TestSessionDryRun(t *testing.T) {
	prefix := redistest.Prefix(t)
	out, work, err := session(t, prefix, "--dry-run")
	if err != nil {
		t.Fatalf("session.sh --dry-run: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "$ "+enqueueBin+" --config "+filepath.Join(work, "shaper.yaml")+" "); n != 7 {
		t.Errorf("%d enqueue commands printed, want 7:\n%s", n, out)
	}
	if exitLine.Match(out) || strings.Contains(string(out), "enqueue:") {
		t.Errorf("a command ran in the dry run:\n%s", out)
	}
	b, err := queue.NewInspector(redistest.Client(t), prefix).Backlog("reports")
	if err != nil {
		t.Fatal(err)
	}
	if b.Pending+b.Scheduled != 0 {
		t.Errorf("backlog pending %d scheduled %d after a dry run, want none", b.Pending, b.Scheduled)
	}
}
