package enqueuecli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func TestLineReader(t *testing.T) {
	t.Parallel()
	in := "\xef\xbb\xbf{\"a\":1}\r\n\n" + strings.Repeat("x", 50) + "\nshort\r\nlast"
	lr := newLineReader(strings.NewReader(in), 20)
	type got struct {
		line    string
		no      int
		tooLong bool
	}
	want := []got{{`{"a":1}`, 1, false}, {"", 2, false}, {"", 3, true}, {"short", 4, false}, {"last", 5, false}}
	for i, w := range want {
		line, no, tooLong, err := lr.next()
		if err != nil || string(line) != w.line || no != w.no || tooLong != w.tooLong {
			t.Errorf("step %d: got (%q, %d, %v, %v), want (%q, %d, %v, nil)", i, line, no, tooLong, err, w.line, w.no, w.tooLong)
		}
	}
	if _, _, _, err := lr.next(); err != io.EOF {
		t.Errorf("after the last line: err = %v, want EOF", err)
	}
	if lr.off != int64(len(in)) {
		t.Errorf("offset %d, want %d", lr.off, len(in))
	}
	// A line longer than the reader's own buffer.
	long := strings.Repeat("y", 200<<10)
	lr = newLineReader(strings.NewReader(long+"\nok\n"), 300<<10)
	if line, _, tooLong, err := lr.next(); err != nil || tooLong || len(line) != len(long) {
		t.Errorf("200KiB line: len %d tooLong %v err %v", len(line), tooLong, err)
	}
	if line, no, _, _ := lr.next(); string(line) != "ok" || no != 2 {
		t.Errorf("after the long line: %q line %d", line, no)
	}
	if _, _, _, err := newLineReader(strings.NewReader(""), 10).next(); err != io.EOF {
		t.Errorf("empty input: %v, want EOF", err)
	}
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	good := [][]string{
		{"--config", "x.yaml"},
		{"--redis", "redis://h", "--downstream", "api", "--payload", "", "--key", "k", "--cost", "0", "--in", "0s"},
		{"--dry-run"},
		{"--config", "x", "--rate", "2.5", "--concurrency", "256", "--progress", "never", "-q"},
		{"--config", "x", "--ttl", "1d", "--task-timeout", "1d12h", "--redis-timeout", "1500ms"},
	}
	for i, args := range good {
		if _, err := parseFlags(args, io.Discard); err != nil {
			t.Errorf("good %d %v: %v", i, args, err)
		}
	}
	bad := []struct {
		args []string
		want string
	}{
		{[]string{"--config", "x", "--concurrency", "0"}, "--concurrency must be 1..256, got 0"},
		{[]string{"--config", "x", "--progress", "yes"}, `--progress must be auto, always or never, got "yes"`},
		{[]string{"--config", "x", "-v", "-q"}, "set -v or -q, not both"},
		{[]string{"--config", "x", "--payload", "p", "--rejects", "r"}, "--rejects is for JSON Lines input"},
		{[]string{"--config", "x", "--payload", "p", "--unique", ""}, "--unique must not be empty"},
		{[]string{"--config", "x", "--payload", "p", "--file", "f"}, "--file reads many tasks"},
		{[]string{"--config", "x", "--max-retry", "-2"}, "--max-retry must be 0..10000, got -2"},
		{[]string{"--config", "x", "--priority", "6"}, "--priority must be an integer from 1 (first) to 5 (last), got 6"},
		{[]string{"--config", "x", "--priority", "-1"}, "--priority must be an integer from 1 (first) to 5 (last), got -1"},
		{[]string{"--config", "x", "--priority", "high"}, `invalid value "high" for flag -priority`},
		{[]string{"--config", "x", "--task-timeout", "0s"}, "--task-timeout must be positive"},
		{[]string{"--config", "x", "--rate", "0"}, `--rate: rate must be positive, got "0"`},
		{[]string{"--config", "x", "--rate", "10/fortnight"}, `unknown period "fortnight"`},
		{[]string{"--config", "x", "--cost", "many"}, `invalid value "many" for flag -cost`},
		{[]string{"--config", "x", "--redis-timeout", "-1s"}, "--redis-timeout must be positive"},
		{[]string{"--config", "x", "--ttl", "5"}, `invalid value "5" for flag -ttl: want a duration such as 30s, 5m, 1h30m or 1d`},
		{[]string{"--config", "x", "--task-timeout", "soon"}, `invalid value "soon" for flag -task-timeout: want a duration`},
	}
	for i, c := range bad {
		_, err := parseFlags(c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("bad %d %v: %v, want one line containing %q", i, c.args, err, c.want)
		}
	}
	var help bytes.Buffer
	if _, err := parseFlags([]string{"-h"}, &help); err == nil || !strings.Contains(help.String(), "Exit codes: 0 all enqueued") ||
		!strings.Contains(help.String(), "-skip-duplicates") || !strings.Contains(help.String(), "-priority int") {
		t.Errorf("-h: %v, help %q", err, help.String())
	}
	// --priority sets the default priority; 0 leaves it unset.
	for _, c := range []struct {
		arg  string
		want int // 0: unset
	}{{"1", 1}, {"5", 5}, {"0", 0}} {
		o, err := parseFlags([]string{"--config", "x", "--priority", c.arg}, io.Discard)
		got := 0
		if err == nil && o.defaults.Priority != nil {
			got = *o.defaults.Priority
		}
		if err != nil || got != c.want {
			t.Errorf("--priority %s: default priority %d (%v), want %d", c.arg, got, err, c.want)
		}
	}
}

func TestExitCodePrecedence(t *testing.T) {
	t.Parallel()
	cases := []struct {
		s         Summary
		redisDown bool
		skipDup   bool
		want      int
	}{
		{Summary{Accepted: 5, Deferred: 2}, false, false, ExitOK},
		{Summary{Accepted: 5, Rejected: 1}, false, false, ExitRejected},
		{Summary{Rejected: 1, Duplicates: 1}, false, false, ExitFailed},
		{Summary{Rejected: 1, Duplicates: 1}, false, true, ExitRejected},
		{Summary{Duplicates: 1}, false, true, ExitOK},
		{Summary{Rejected: 1, Failed: 1, Invalid: 1}, false, false, ExitBadInput},
		{Summary{Rejected: 1, Failed: 1, Invalid: 1}, true, false, ExitRedis},
		{Summary{Invalid: 1, Interrupted: true}, true, false, ExitInterrupted},
	}
	for i, c := range cases {
		r := &runner{o: &options{skipDuplicates: c.skipDup}, redisDown: c.redisDown}
		if got := r.exitCode(c.s); got != c.want {
			t.Errorf("case %d: exit %d, want %d", i, got, c.want)
		}
	}
}

func TestRenderProgress(t *testing.T) {
	t.Parallel()
	got := renderProgress(progressStats{tasks: 450, accepted: 400, rejected: 50, read: 450, total: 1000}, time.Second)
	want := "[=========>          ]  45%  450 tasks  400 accepted  0 deferred  50 rejected  450/s"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	got = renderProgress(progressStats{tasks: 20000, accepted: 19000, invalid: 3, failed: 1}, 2*time.Second)
	want = "20000 tasks  19000 accepted  0 deferred  0 rejected  3 invalid  1 failed  10k/s"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if got := renderProgress(progressStats{read: 10, total: 10}, 0); !strings.HasPrefix(got, "[====================] 100%") {
		t.Errorf("complete: %q", got)
	}
}

func TestHumanSummary(t *testing.T) {
	t.Parallel()
	ra := 59.9321
	s := Summary{Tasks: 1000, Accepted: 100, Rejected: 899, Invalid: 1, FirstRetryAfter: &ra, ElapsedSeconds: 0.5,
		StoppedAtLine: 0}
	want := "1000 tasks in 500ms: 100 accepted, 0 deferred, 899 rejected (first Retry-After 59.932s), 1 invalid"
	if got := humanSummary(s); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	s = Summary{Tasks: 11, Accepted: 10, Failed: 1, StoppedAtLine: 11, Error: "redis unreachable"}
	if got := humanSummary(s); !strings.HasSuffix(got, ", 1 failed; stopped at line 11: redis unreachable") {
		t.Errorf("got %q", got)
	}
}

func TestPacer(t *testing.T) {
	t.Parallel()
	p := newPacer(limiters.PerSecond(200)) // 5ms apart
	start := time.Now()
	for range 21 {
		if err := p.wait(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("21 waits at 200/s took %v, want at least 100ms", d)
	}
	stopped := make(chan struct{})
	close(stopped)
	p = newPacer(limiters.PerMinute(1))
	p.wait(context.Background(), stopped) // the first slot is now
	if err := p.wait(context.Background(), stopped); err == nil {
		t.Errorf("wait after stop = nil, want an error")
	}
	if err := newPacer(limiters.Limit{}).wait(context.Background(), nil); err != nil {
		t.Errorf("unpaced wait: %v", err)
	}
}

// In process, with the race detector: many workers against one bucket
// admit exactly its capacity, and the summary adds up.
func TestMainConcurrentExact(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "shaper.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
redis: {url: %q, prefix: %q}
http: {listen: off}
downstreams:
  - name: api
    rate: 10/s
    handler: {type: log}
    admission: {limiters: [{name: tenant, rate: 1/h, burst: 100}]}
`, redistest.URL(t), prefix)), 0o600)
	var in strings.Builder
	for i := range 500 {
		fmt.Fprintf(&in, `{"downstream":"api","key":"k","payload":%d}`+"\n", i)
	}
	rejects := filepath.Join(dir, "rejects.jsonl")
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), []string{"--config", cfg, "--concurrency", "8", "--json", "--progress", "always", "--rejects", rejects},
		IO{Stdin: strings.NewReader(in.String()), Stdout: &stdout, Stderr: &stderr})
	var s Summary
	if err := json.Unmarshal(stdout.Bytes(), &s); err != nil {
		t.Fatalf("summary: %v: %q", err, stdout.String())
	}
	if code != ExitRejected || s.Accepted != 100 || s.Rejected != 400 || s.Tasks != 500 || s.ExitCode != ExitRejected {
		t.Errorf("exit %d, summary %+v; want 1, 100 accepted, 400 rejected", code, s)
	}
	b, _ := os.ReadFile(rejects)
	if n := strings.Count(string(b), "\n"); n != 400 {
		t.Errorf("rejects file has %d lines, want 400", n)
	}
	inspector := queue.NewInspector(redistest.Client(t), prefix)
	defer inspector.Asynq().Close()
	if bl, err := inspector.Backlog("api"); err != nil || bl.Pending != 100 {
		t.Errorf("backlog %+v %v, want 100 pending", bl, err)
	}
}
