package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/shaper-io/shaper/internal/testutil"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
)

var enqueueBin, shaperBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "enqueue-bin-")
	if err != nil {
		panic(err)
	}
	enqueueBin = filepath.Join(dir, "enqueue")
	shaperBin = filepath.Join(dir, "shaper")
	for bin, pkg := range map[string]string{enqueueBin: ".", shaperBin: "../shaper"} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", pkg, err, out)
			os.Exit(1)
		}
	}
	defer os.RemoveAll(dir)
	redistest.Main(m)
}

// result is a finished enqueue process.
type result struct {
	code           int
	stdout, stderr string
	summary        map[string]any // stdout parsed, with --json
	elapsed        time.Duration
}

func (r result) String() string {
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", r.code, tail(r.stdout, 2000), tail(r.stderr, 2000))
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("run enqueue: %v", err)
	return -1
}

// run runs enqueue with stdin and args and waits for it.
func run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(enqueueBin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := result{code: exitCode(t, err), stdout: stdout.String(), stderr: stderr.String(), elapsed: time.Since(start)}
	if slicesContains(args, "--json") {
		if err := json.Unmarshal(stdout.Bytes(), &r.summary); err != nil {
			t.Fatalf("--json: stdout is not a JSON object: %v; %s", err, r)
		}
	}
	return r
}

func slicesContains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func num(t *testing.T, r result, field string) float64 {
	t.Helper()
	v, ok := r.summary[field].(float64)
	if !ok {
		t.Fatalf("summary field %q = %v, want a number; %s", field, r.summary[field], r)
	}
	return v
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// config writes a shaper config for redisURL and prefix with downstream
// "api" (admission as given, YAML flow style; "" for none) and "plain".
func config(t *testing.T, redisURL, prefix, admission string) string {
	t.Helper()
	adm := ""
	if admission != "" {
		adm = ", admission: " + admission
	}
	return writeFile(t, "shaper.yaml", fmt.Sprintf(`
redis: {url: %q, prefix: %q, timeout: 500ms}
http: {listen: off, max_body: 4KiB}
downstreams:
  - {name: api, rate: 10/s, handler: {type: log}%s}
  - {name: plain, rate: 10/s, handler: {type: log}}
`, redisURL, prefix, adm))
}

func lines(n int, format string) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, format+"\n", i)
	}
	return b.String()
}

type inspector struct {
	in     *queue.Inspector
	prefix string
}

func inspect(t *testing.T, rdb redis.UniversalClient, prefix string) *inspector {
	t.Helper()
	in := queue.NewInspector(rdb, prefix)
	t.Cleanup(func() { in.Asynq().Close() })
	return &inspector{in: in, prefix: prefix}
}

func (i *inspector) backlog(t *testing.T, ds string) queue.Backlog {
	t.Helper()
	b, err := i.in.Backlog(ds)
	if err != nil && strings.Contains(err.Error(), "does not exist") {
		return queue.Backlog{Downstream: ds} // never written to
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (i *inspector) scheduled(t *testing.T, ds string) []*asynq.TaskInfo {
	t.Helper()
	var all []*asynq.TaskInfo
	for page := 1; ; page++ {
		ts, err := i.in.Asynq().ListScheduledTasks(i.prefix+":"+ds, asynq.PageSize(500), asynq.Page(page))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, ts...)
		if len(ts) < 500 {
			return all
		}
	}
}

const slowBucket = `{on_reject: %s, limiters: [{name: tenant, algorithm: token_bucket, rate: 1/m, burst: 100}]}`

// 1,000 tasks against a token bucket of 100 with a slow refill (1/min):
// exactly 100 accepted, 900 rejected with a Retry-After, exit code 1, and
// --rejects holds exactly the rejected lines.
func TestThousandTasksRejected(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	cfg := config(t, redistest.URL(t), prefix, fmt.Sprintf(slowBucket, "reject"))
	input := lines(1000, `{"downstream":"api","key":"tenant-1","payload":{"n":%d}}`)
	rejects := filepath.Join(t.TempDir(), "rejects.jsonl")
	r := run(t, input, "--config", cfg, "--json", "--rejects", rejects)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1 (some rejected); %s", r.code, r)
	}
	if num(t, r, "accepted") != 100 || num(t, r, "rejected") != 900 || num(t, r, "deferred") != 0 ||
		num(t, r, "tasks") != 1000 || num(t, r, "invalid") != 0 || num(t, r, "exit_code") != 1 {
		t.Errorf("summary %v, want 100 accepted and 900 rejected of 1000", r.summary)
	}
	// One token a minute; the bucket was emptied a moment ago.
	if ra := num(t, r, "first_retry_after"); ra <= 55 || ra > 60 {
		t.Errorf("first_retry_after = %v s, want just under 60", ra)
	}
	if r.stderr != "" {
		t.Errorf("stderr %q, want nothing (with --json the summary is on stdout)", r.stderr)
	}
	in := inspect(t, redistest.Client(t), prefix)
	if b := in.backlog(t, "api"); b.Pending != 100 || b.Total() != 100 {
		t.Errorf("backlog %+v, want exactly 100 pending", b)
	}
	got, err := os.ReadFile(rejects)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join(strings.SplitAfter(input, "\n")[100:], "")
	if string(got) != want {
		t.Errorf("--rejects file has %d lines, want the 900 rejected lines (101-1000) as given", strings.Count(string(got), "\n"))
	}
	// The second run gets nothing in, and says so on stderr without --json.
	r = run(t, input[:strings.Index(input, "\n")+1], "--config", cfg)
	if r.code != 1 || !strings.Contains(r.stderr, "1 task in") || !strings.Contains(r.stderr, "0 accepted, 0 deferred, 1 rejected (first Retry-After") {
		t.Errorf("second run: %s, want exit 1 and a summary line", r)
	}
}

// The same 1,000 tasks with on_reject: defer: all enqueued, 100 to run now
// and 900 scheduled at the Retry-After the limiter gave them.
func TestThousandTasksDeferred(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	cfg := config(t, redistest.URL(t), prefix, fmt.Sprintf(slowBucket, "defer"))
	input := lines(1000, `{"downstream":"api","key":"tenant-1","payload":{"n":%d}}`)
	r := run(t, input, "--config", cfg, "--json")
	if r.code != 0 {
		t.Fatalf("exit %d, want 0 (all enqueued); %s", r.code, r)
	}
	if num(t, r, "accepted") != 100 || num(t, r, "deferred") != 900 || num(t, r, "enqueued") != 1000 || num(t, r, "rejected") != 0 {
		t.Errorf("summary %v, want 100 accepted and 900 deferred", r.summary)
	}
	// The limiter's own view of when tenant-1 may next pass.
	rdb := redistest.Client(t)
	lim, err := limiters.New(rdb, limiters.Config{Name: "tenant", Algorithm: limiters.TokenBucket,
		Limit: limiters.PerMinute(1).WithBurst(100), Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	state, err := lim.Peek(context.Background(), "tenant-1", 1)
	if err != nil || state.Allowed {
		t.Fatalf("limiter state %v %v, want rejecting", state, err)
	}
	// now after the peek: the Retry-After was counted from the Redis
	// clock during it, so retryAt is not before the limiter's time
	retryAt := time.Now().Add(state.RetryAfter)
	in := inspect(t, rdb, prefix)
	if b := in.backlog(t, "api"); b.Pending != 100 || b.Scheduled != 900 {
		t.Errorf("backlog %+v, want 100 pending and 900 scheduled", b)
	}
	early, late := 0, 0
	for _, ti := range in.scheduled(t, "api") {
		// asynq stores whole seconds; the producer rounds up, so a task is
		// never due before its Retry-After, and at most a second after it
		// (plus the round trips that set each one's retry time: 100ms)
		if ti.NextProcessAt.Before(retryAt.Add(-time.Second)) {
			early++
		}
		if ti.NextProcessAt.After(retryAt.Add(time.Second + 100*time.Millisecond)) {
			late++
		}
	}
	if early > 0 || late > 0 {
		t.Errorf("of 900 deferred tasks, %d are due before and %d more than 1s after the limiter's retry time %v",
			early, late, retryAt.Format(time.RFC3339Nano))
	}
}

// One task from flags: the id on stdout; --at schedules it; a taken unique
// key is exit 4 (0 with --skip-duplicates); a rejection is exit 1 with one
// line naming the limiter.
func TestSingleTask(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	cfg := config(t, redistest.URL(t), prefix, `{limiters: [{name: tenant, rate: 1/h, burst: 2}]}`)
	at := time.Now().Add(time.Hour).Truncate(time.Second).UTC()
	r := run(t, "", "--config", cfg, "--downstream", "plain", "--payload", `{"a":1}`, "--at", at.Format(time.RFC3339), "--type", "charge")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("%s, want exit 0 and nothing on stderr", r)
	}
	id := strings.TrimSpace(r.stdout)
	in := inspect(t, redistest.Client(t), prefix)
	ti, err := in.in.Asynq().GetTaskInfo(prefix+":plain", id)
	if err != nil {
		t.Fatalf("task %q: %v", id, err)
	}
	if string(ti.Payload) != `{"a":1}` || ti.Type != "charge" || ti.State != asynq.TaskStateScheduled || !ti.NextProcessAt.Equal(at) {
		t.Errorf("task %+v, want payload {\"a\":1}, type charge, scheduled at %v", ti, at)
	}

	payload := writeFile(t, "payload.bin", "\x00binary\xff")
	r = run(t, "", "--config", cfg, "--downstream", "plain", "--payload-file", payload, "--unique", "job-7", "--in", "10m", "--json")
	if r.code != 0 || r.summary["id"] != "job-7" {
		t.Fatalf("%s, want exit 0 and id job-7", r)
	}
	if pa, err := time.Parse(time.RFC3339Nano, fmt.Sprint(r.summary["process_at"])); err != nil || pa.Before(time.Now().Add(9*time.Minute)) {
		t.Errorf("process_at %v, want about 10m from now", r.summary["process_at"])
	}
	if ti, err := in.in.Asynq().GetTaskInfo(prefix+":plain", "job-7"); err != nil || string(ti.Payload) != "\x00binary\xff" {
		t.Errorf("job-7: %v %v, want the file's bytes", ti, err)
	}
	r = run(t, "", "--config", cfg, "--downstream", "plain", "--payload", "x", "--unique", "job-7")
	if r.code != 4 || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, `duplicate: a task with unique key "job-7" exists`) {
		t.Errorf("duplicate: %s, want exit 4 and one line", r)
	}
	if r = run(t, "", "--config", cfg, "--downstream", "plain", "--payload", "x", "--unique", "job-7", "--skip-duplicates"); r.code != 0 {
		t.Errorf("duplicate with --skip-duplicates: %s, want exit 0", r)
	}

	for i := range 2 {
		if r := run(t, "", "--config", cfg, "--downstream", "api", "--payload", "x", "--key", "k"); r.code != 0 {
			t.Fatalf("api %d: %s", i, r)
		}
	}
	r = run(t, "", "--config", cfg, "--downstream", "api", "--payload", "x", "--key", "k")
	if r.code != 1 || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, `rejected by token_bucket "tenant": Retry-After 59m59.`) {
		t.Errorf("rejected: %s, want exit 1 and one line with the Retry-After", r)
	}
	if b := in.backlog(t, "api"); b.Total() != 2 {
		t.Errorf("api backlog %+v, want 2", b)
	}
}

// Bad input: each is one line on stderr, exit 2, and nothing is enqueued.
func TestBadInput(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	url := redistest.URL(t)
	// max_cost above the limiter's capacity, so that the limiter's bound is the one a cost of 101 meets
	cfg := config(t, url, prefix, `{limiters: [{name: tenant, rate: 10/s, burst: 100}]}, max_cost: 1000`)
	small := config(t, url, prefix, "")
	badYAML := writeFile(t, "bad.yaml", "redis: {url: \"redis://x\", prefix: p}\ndownstreams:\n  - {name: api, rate: fast, handler: {type: log}}\n")
	noRedis := writeFile(t, "embedded.yaml", "downstreams:\n  - {name: api, rate: 5/s, handler: {type: log}}\n")
	big := strings.Repeat("x", 5000)
	c := []string{"--config", cfg}
	cases := []struct {
		stdin string
		args  []string
		want  string
	}{
		// JSON Lines
		{`{"downstream":"api","payload":` + "\n", c, `stdin:1: malformed JSON: the object is cut short`},
		{`{"downstream":"api" "payload":1}` + "\n", c, `stdin:1: malformed JSON at column 21`},
		{"\n\n" + `["api"]` + "\n", c, `stdin:3: got a JSON array, want an object`},
		{`{"downstream":"api","cots":1}` + "\n", c, `unknown field "cots"`},
		{`{"downstream":"web"}` + "\n", c, `unknown downstream "web" (the config has api, plain)`},
		{`{"downstream":"api","cost":-3}` + "\n", c, `cost: must not be negative, got -3`},
		{`{"downstream":"api","cost":"x"}` + "\n", c, `cost: got the string "x", want an integer`},
		{`{"downstream":"api","cost":101}` + "\n", c, `cost: 101 exceeds the capacity 100 of token_bucket "tenant"`},
		{`{"downstream":"api","cost":11}` + "\n", []string{"--config", small}, `cost: 11 exceeds the capacity 10 of downstream "api"`},
		{`{"downstream":"api","payload":"` + big + `"}` + "\n", c, `payload is 5002 bytes, over the limit of 4096`},
		{`{"downstream":"api","at":"next tuesday"}` + "\n", c, `at: invalid time "next tuesday"`},
		{`{"downstream":"api","in":"-1s"}` + "\n", c, `in: must not be negative`},
		{`{"downstream":"api","at":"2026-01-01T00:00:00Z","in":"1s"}` + "\n", c, `in: set both at and in`},
		{`{"downstream":"api","max_retry":-1}` + "\n", c, `max_retry: must be 0..10000, got -1`},
		{`{"downstream":"api"} {"downstream":"api"}` + "\n", c, `unexpected data after the JSON object`},
		{`{"payload":1}` + "\n", c, `downstream: required (set "downstream" in the line, or --downstream)`},
		{`{"downstream":"api","payload_base64":"***"}` + "\n", c, `payload_base64: invalid base64`},
		{"{\"downstream\":\"api\",\"key\":\"\xff\"}\n", c, `not valid UTF-8`},
		// flags
		{"", append(c, "--downstream", "api", "--payload", "x", "--cost", "-1"), `--cost must not be negative, got -1`},
		{"", append(c, "--downstream", "api", "--payload", "x", "--at", "yesterday"), `--at: invalid time "yesterday"`},
		{"", append(c, "--downstream", "api", "--payload", "x", "--in", "soon"), `--in: invalid duration "soon"`},
		{"", append(c, "--downstream", "api", "--payload", "x", "--at", "1", "--in", "1s"), `set --at or --in, not both`},
		{"", append(c, "--downstream", "api", "--payload", "x", "--payload-file", "/dev/null"), `set --payload or --payload-file, not both`},
		{"", append(c, "--downstream", "api", "--payload-file", "/nonexistent/payload"), `--payload-file: open /nonexistent/payload`},
		{"", append(c, "--payload", "x"), `--downstream is required`},
		{"", append(c, "--downstream", "web", "--payload", "x"), `unknown downstream "web"`},
		{"", append(c, "--unique", "u"), `--unique is for one task`},
		{"", append(c, "--rate", "fast"), `--rate: invalid rate "fast" (want <number>/<unit>, e.g. 50/s)`},
		{"", append(c, "--bogus"), `flag provided but not defined: -bogus (see enqueue -h)`},
		{"", append(c, "extra"), `unexpected argument "extra"`},
		{"", append(c, "--file", "/nonexistent/tasks.jsonl"), `--file: open /nonexistent/tasks.jsonl`},
		{"", []string{"--downstream", "api", "--payload", "x"}, `set --config (the shaper config file) or --redis (a redis:// URL)`},
		{"", []string{"--config", "/nonexistent.yaml"}, `config: open /nonexistent.yaml`},
		{"", []string{"--config", badYAML}, `downstreams[0].rate`},
		{"", []string{"--config", noRedis}, `the config names no Redis`},
		{"", []string{"--redis", "http://" + strings.TrimPrefix(url, "redis://")}, `--redis: want a redis://, rediss:// or unix:// URL`},
	}
	for i, tc := range cases {
		r := run(t, tc.stdin, tc.args...)
		msg := strings.TrimSuffix(r.stderr, "\n")
		if tc.stdin != "" {
			// The summary line follows the error line.
			first, rest, _ := strings.Cut(msg, "\n")
			if !strings.HasPrefix(rest, "enqueue: 1 task in ") || strings.Contains(rest, "\n") {
				t.Errorf("case %d: stderr %q, want the error and then one summary line", i, r.stderr)
			}
			msg = first
		}
		if r.code != 2 || strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "enqueue: ") || !strings.Contains(msg, tc.want) {
			t.Errorf("case %d: %s; want exit 2 and one line containing %q", i, r, tc.want)
		}
	}
	in := inspect(t, redistest.Client(t), prefix)
	for _, ds := range []string{"api", "plain", "web"} {
		if n := in.backlog(t, ds).Total(); n != 0 {
			t.Errorf("%s: %d tasks enqueued by bad input, want 0", ds, n)
		}
	}
}

// Bad lines among good ones: each bad line is one error naming its line;
// the good ones are enqueued; exit 2.
func TestBadLinesAmongGood(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	cfg := config(t, redistest.URL(t), prefix, "")
	input := "{\"payload\":1}\nnot json\n\n{\"payload\":2,\"cost\":-1}\r\n{\"payload\":3}\r\n{\"downstream\":\"plain\",\"payload\":4}"
	path := writeFile(t, "tasks.jsonl", input)
	r := run(t, "", "--config", cfg, "--downstream", "api", "--file", path, "--json", "-v")
	if r.code != 2 || num(t, r, "invalid") != 2 || num(t, r, "accepted") != 3 || num(t, r, "tasks") != 5 {
		t.Fatalf("%s, want exit 2, 2 invalid, 3 accepted of 5", r)
	}
	errs := 0
	for _, l := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		switch {
		case strings.Contains(l, "accepted"):
		case strings.HasPrefix(l, "enqueue: "+path+":2: malformed JSON at column 2"),
			strings.HasPrefix(l, "enqueue: "+path+":4: cost: must not be negative"):
			errs++
		default:
			t.Errorf("unexpected stderr line %q", l)
		}
	}
	if errs != 2 {
		t.Errorf("stderr %q, want the 2 bad lines named", r.stderr)
	}
	in := inspect(t, redistest.Client(t), prefix)
	if a, p := in.backlog(t, "api").Total(), in.backlog(t, "plain").Total(); a != 2 || p != 1 {
		t.Errorf("api %d, plain %d tasks, want 2 and 1", a, p)
	}
}

// Redis unreachable at the start: exit 3 at once, one line, stdin unread.
func TestRedisUnreachableAtStart(t *testing.T) {
	t.Parallel()
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cfg := config(t, fmt.Sprintf("redis://127.0.0.1:%d", port), "p", "")
	r := run(t, `{"downstream":"api"}`+"\n", "--config", cfg, "--json")
	if r.code != 3 || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "enqueue: redis unreachable (redis://127.0.0.1:") ||
		!strings.Contains(r.stderr, "connection refused") {
		t.Errorf("%s, want exit 3 and one line saying the connection was refused", r)
	}
	if num(t, r, "exit_code") != 3 || !strings.HasPrefix(fmt.Sprint(r.summary["error"]), "redis unreachable") || num(t, r, "tasks") != 0 {
		t.Errorf("summary %v, want exit_code 3 and the error", r.summary)
	}
}

// Redis stopped in the middle of a run: the run stops with exit 3 and says
// at which line; the admission policy is honoured (fail_closed names the
// limiter that could not decide) and what was enqueued before the stop is
// all there is.
func TestRedisStoppedMidRun(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"fail_closed", "fail_open"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			srv, err := redistest.Start("--appendonly", "yes", "--appendfsync", "always")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Stop(); srv.Cleanup() })
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
			t.Cleanup(func() { rdb.Close() })
			prefix := redistest.Prefix(t)
			cfg := config(t, "redis://"+srv.Addr, prefix,
				fmt.Sprintf(`{failure: %s, limiters: [{name: tenant, rate: 1000/s}]}`, policy))
			cmd := exec.Command(enqueueBin, "--config", cfg, "--json")
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill() })
			io.WriteString(stdin, lines(10, `{"downstream":"api","key":"t","payload":%d}`))
			in := inspect(t, rdb, prefix)
			waitFor(t, 10*time.Second, "10 tasks enqueued", func() bool { return in.backlog(t, "api").Total() == 10 })
			srv.Stop()
			io.WriteString(stdin, lines(5, `{"downstream":"api","key":"t","payload":"after %d"}`))
			stdin.Close()
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var werr error
			select {
			case werr = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("enqueue did not exit within 30s of Redis stopping")
			}
			r := result{code: exitCode(t, werr), stdout: stdout.String(), stderr: stderr.String()}
			if err := json.Unmarshal(stdout.Bytes(), &r.summary); err != nil {
				t.Fatalf("summary: %v; %s", err, r)
			}
			// fail_closed never sent line 11; fail_open sent it to a Redis
			// that was gone, and the client cannot tell whether it arrived.
			failed, uncertain := 1.0, 0.0
			if policy == "fail_open" {
				failed, uncertain = 0, 1
			}
			if r.code != 3 || num(t, r, "accepted") != 10 || num(t, r, "failed") != failed || num(t, r, "uncertain") != uncertain ||
				num(t, r, "stopped_at_line") != 11 {
				t.Errorf("%s, want exit 3, 10 accepted, %v failed, %v uncertain, stopped at line 11", r, failed, uncertain)
			}
			want := map[string]string{
				"fail_closed": `stopped at line 11 of stdin: redis unreachable (admission failed closed: token_bucket "tenant" could not decide)`,
				"fail_open":   `stopped at line 11 of stdin: redis unreachable (admission by token_bucket "tenant" let the task through, then the enqueue failed): `,
			}[policy]
			if strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "every line before 11 was handled") {
				t.Errorf("stderr %q, want one line containing %q", r.stderr, want)
			}
			if policy == "fail_open" && !strings.Contains(r.stderr, "maybe stored: line 11") {
				t.Errorf("stderr %q, want line 11 named as maybe stored", r.stderr)
			}
			if err := srv.StartAgain(); err != nil {
				t.Fatal(err)
			}
			if n := in.backlog(t, "api").Total(); n != 10 {
				t.Errorf("after Redis came back: %d tasks, want the 10 enqueued before the stop", n)
			}
		})
	}
}

var waitFor = testutil.WaitFor

// The progress bar is drawn only when asked for or on a terminal (the
// tests' stderr is a pipe).
func TestProgressBar(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	cfg := config(t, redistest.URL(t), prefix, "")
	path := writeFile(t, "tasks.jsonl", lines(200, `{"downstream":"plain","payload":%d}`))
	r := run(t, "", "--config", cfg, "--file", path)
	if r.code != 0 || strings.Contains(r.stderr, "\r") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("without a terminal: %s, want exit 0 and only the summary line", r)
	}
	r = run(t, "", "--config", cfg, "--file", path, "--progress", "always", "--rate", "1000/s")
	if r.code != 0 || !strings.Contains(r.stderr, "\r[") || !strings.Contains(r.stderr, "accepted") {
		t.Errorf("--progress always: %s, want a bar", r)
	}
	last := r.stderr[strings.LastIndex(r.stderr, "\r"):]
	if !strings.HasPrefix(last, "\r\x1b[K") || !strings.Contains(last, "enqueue: 200 tasks in") {
		t.Errorf("the bar is not erased before the summary: %q", last)
	}
}

// --rate spaces enqueues: 21 tasks at 50/s take at least 20 × 20ms.
func TestRate(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	cfg := config(t, redistest.URL(t), prefix, "")
	r := run(t, lines(21, `{"payload":%d}`), "--config", cfg, "--downstream", "plain", "--rate", "50/s", "--json")
	if r.code != 0 || num(t, r, "accepted") != 21 {
		t.Fatalf("%s", r)
	}
	if el := num(t, r, "elapsed_seconds"); el < 0.4 || el > 5 {
		t.Errorf("21 tasks at 50/s took %.3fs, want at least 0.4s", el)
	}
}

// --redis without a config: no admission, any downstream name; --dry-run
// enqueues nothing.
func TestRedisFlagAndDryRun(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	input := lines(3, `{"downstream":"anything","payload":%d}`)
	r := run(t, input, "--dry-run", "--redis", redistest.URL(t), "--prefix", prefix, "--json")
	if r.code != 0 || r.summary["dry_run"] != true || num(t, r, "tasks") != 3 || num(t, r, "enqueued") != 0 {
		t.Errorf("dry run: %s", r)
	}
	in := inspect(t, redistest.Client(t), prefix)
	if n := in.backlog(t, "anything").Total(); n != 0 {
		t.Errorf("dry run enqueued %d tasks", n)
	}
	if r := run(t, input+"{\n", "--dry-run", "--json"); r.code != 2 || num(t, r, "invalid") != 1 {
		t.Errorf("dry run with a bad line: %s, want exit 2", r)
	}
	// one task from flags: the dry run says what it checked, in one line
	if r := run(t, "", "--dry-run", "--downstream", "anything", "--payload", "{}", "--key", "t1"); r.code != 0 ||
		!strings.Contains(r.stderr, `dry run: the task for anything is valid (cost 1, key "t1")`) {
		t.Errorf("dry run of one task: %s, want exit 0 and a line saying it is valid", r)
	}
	r = run(t, input, "--redis", redistest.URL(t), "--prefix", prefix, "--concurrency", "3", "--json")
	if r.code != 0 || num(t, r, "accepted") != 3 {
		t.Errorf("--redis: %s", r)
	}
	if n := in.backlog(t, "anything").Pending; n != 3 {
		t.Errorf("%d pending, want 3", n)
	}
}

// SIGINT stops reading, prints the summary, exits 130.
func TestInterrupt(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	cfg := config(t, redistest.URL(t), prefix, "")
	cmd := exec.Command(enqueueBin, "--config", cfg, "--downstream", "plain", "--json")
	stdin, _ := cmd.StdinPipe()
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); stdin.Close() })
	io.WriteString(stdin, lines(2, `{"payload":%d}`))
	in := inspect(t, redistest.Client(t), prefix)
	waitFor(t, 10*time.Second, "2 tasks", func() bool { return in.backlog(t, "plain").Total() == 2 })
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	r := result{code: exitCode(t, err), stdout: stdout.String(), stderr: stderr.String()}
	json.Unmarshal([]byte(r.stdout), &r.summary)
	if r.code != 130 || r.summary["interrupted"] != true || num(t, r, "accepted") != 2 {
		t.Errorf("%s, want exit 130 and a summary of 2 accepted, interrupted", r)
	}
}

type syncBuffer = testutil.SyncBuffer
