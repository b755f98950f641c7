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

	"github.com/shaper-io/shaper/internal/redistest"
)

// cliOn writes a config with downstreams (YAML list items) on a fresh
// prefix of the test's Redis and returns the prefix and a run of the CLI
// against it (with --progress never): its exit code, stdout and stderr.
func cliOn(t *testing.T, downstreams string) (string, func(stdin string, args ...string) (int, string, string)) {
	t.Helper()
	prefix := redistest.Prefix(t)
	cfg := filepath.Join(t.TempDir(), "shaper.yaml")
	doc := fmt.Sprintf("\nredis: {url: %q, prefix: %q}\nhttp: {listen: off}\ndownstreams:\n", redistest.URL(t), prefix) + downstreams
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return prefix, func(stdin string, args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), append([]string{"--config", cfg, "--progress", "never"}, args...),
			IO{Stdin: strings.NewReader(stdin), Stdout: &stdout, Stderr: &stderr})
		return code, stdout.String(), stderr.String()
	}
}

// jsonRun wraps run so that each call passes --json and returns the
// summary it printed (none after a usage error, exit 2 with no stdout).
func jsonRun(t *testing.T, run func(stdin string, args ...string) (int, string, string)) func(stdin string, args ...string) (int, Summary, string) {
	return func(stdin string, args ...string) (int, Summary, string) {
		t.Helper()
		code, stdout, stderr := run(stdin, append([]string{"--json"}, args...)...)
		return code, summaryOf(t, code, stdout), stderr
	}
}

// summaryOf reads the --json summary in stdout (the zero Summary after a
// usage error: exit 2 with nothing on stdout).
func summaryOf(t *testing.T, code int, stdout string) Summary {
	t.Helper()
	var s Summary
	if stdout == "" && code == ExitBadInput {
		return s
	}
	if err := json.Unmarshal([]byte(stdout), &s); err != nil {
		t.Fatalf("summary: %v: %q", err, stdout)
	}
	return s
}
