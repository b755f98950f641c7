package enqueuecli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// enqueue refuses a deadline the task could never meet, dry run or not:
// 1970, or a deadline before --at.
func TestMainImpossibleDeadline(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "shaper.yaml")
	os.WriteFile(cfg, []byte("http: {listen: off}\ndownstreams:\n  - {name: api, rate: 10/s, handler: {type: log}}\n"), 0o600)
	at := time.Now().Add(time.Hour)
	for _, args := range [][]string{
		{"--deadline", "1970-01-02T00:00:00Z"},
		{"--at", at.Format(time.RFC3339), "--deadline", at.Add(-time.Minute).Format(time.RFC3339)},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), append([]string{"--config", cfg, "--dry-run", "--progress", "never", "--downstream", "api", "--payload", "1"}, args...),
			IO{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr})
		if code == ExitOK || !strings.Contains(stderr.String(), "deadline") || !strings.Contains(stderr.String(), "could never start in time") {
			t.Errorf("enqueue --dry-run %s: exit %d, stderr %q; want a refusal naming the deadline", strings.Join(args, " "), code, stderr.String())
		}
	}
}
