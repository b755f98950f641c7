package main_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"github.com/shaper-io/shaper/internal/testutil"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/testsink"
	"github.com/shaper-io/shaper/queue"
)

var shaperBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "shaper-bin-")
	if err != nil {
		panic(err)
	}
	shaperBin = filepath.Join(dir, "shaper")
	out, err := exec.Command("go", "build", "-o", shaperBin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	redistest.Main(m, func() { os.RemoveAll(dir) })
}

// proc is a running shaper process.
type proc struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan error
}

type syncBuffer = testutil.SyncBuffer

func startShaper(t *testing.T, config string) *proc {
	t.Helper()
	path := filepath.Join(t.TempDir(), "shaper.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: exec.Command(shaperBin, "-config", path), stderr: &syncBuffer{}, done: make(chan error, 1)}
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("shaper pid %d stderr:\n%s", p.cmd.Process.Pid, tail(p.stderr.String(), 3000))
		}
	})
	return p
}

func (p *proc) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Errorf("shaper exited with %v after SIGTERM, want 0", err)
		}
	case <-time.After(20 * time.Second):
		t.Errorf("shaper did not stop within 20s of SIGTERM")
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

var waitFor = testutil.WaitFor

func httpConfig(t *testing.T, prefix, sinkURL, rate string, workers int, maxWait string) string {
	return daemonYAML(t, prefix, fmt.Sprintf(`  - name: api
    rate: %s
    workers: %d
    max_wait: %s
    handler: {type: http, url: %q, timeout: 5s}
`, rate, workers, maxWait, sinkURL))
}

func enqueue(t *testing.T, prefix string, n int) {
	t.Helper()
	p := queue.NewProducer(redistest.Client(t), queue.ProducerConfig{Prefix: prefix})
	defer p.Close()
	for i := 0; i < n; i++ {
		if _, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}); err != nil {
			t.Fatal(err)
		}
	}
}

// Three OS processes share one bucket at 50/s and drain a backlog of 600.
func TestFidelityThreeProcesses(t *testing.T) {
	// Not parallel: the timing claim needs the CPU to itself.
	sink := testsink.New()
	defer sink.Close()
	prefix := redistest.Prefix(t)
	enqueue(t, prefix, 600)
	cfg := httpConfig(t, prefix, sink.URL(), "50/s", 20, "1s")
	procs := []*proc{startShaper(t, cfg), startShaper(t, cfg), startShaper(t, cfg)}
	waitFor(t, 60*time.Second, "600 deliveries", func() bool { return sink.Count() >= 600 })
	for _, p := range procs {
		p.stop(t)
	}
	ok := sink.OK()
	ts := testsink.Times(ok)
	maxWin := testsink.MaxInWindow(ts, time.Second)
	span := testsink.Span(ts)
	rate := testsink.Rate(ts)
	t.Logf("fidelity: %d releases, max in any 1s window %d, span %v, achieved %.3f/s", len(ok), maxWin, span, rate)
	var late []time.Duration
	for _, h := range ok {
		late = append(late, h.At.Sub(h.Slot))
	}
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	var wake, tr []time.Duration
	for _, h := range ok {
		wake = append(wake, h.Wake.Sub(h.Slot))
		tr = append(tr, h.At.Sub(h.Wake))
	}
	sort.Slice(wake, func(i, j int) bool { return wake[i] < wake[j] })
	sort.Slice(tr, func(i, j int) bool { return tr[i] < tr[j] })
	t.Logf("wake minus slot: p50 %v p99 %v max %v; transport p50 %v p99 %v max %v", wake[300], wake[594], wake[599], tr[300], tr[594], tr[599])
	t.Logf("arrival minus slot: min %v p50 %v p99 %v max %v", late[0], late[len(late)/2], late[len(late)*99/100], late[len(late)-1])
	// By release time (X-Shaper-Released, which shaper controls) at most
	// rate + 1; arrivals add the sink's and the loopback's jitter on a
	// shared CPU (checkNoBurst).
	checkNoBurst(t, 50, testsink.MaxInWindow(wakeTimes(ok), time.Second), maxWin)
	// 600 releases spaced 20ms apart span 11.98s; within 2% of 12s.
	if span < 11760*time.Millisecond || span > 12240*time.Millisecond {
		t.Errorf("600 releases took %v, want 12s ± 2%%", span)
	}
	seen := map[string]int{}
	for _, h := range ok {
		seen[h.Payload]++
	}
	for i := 0; i < 600; i++ {
		if n := seen[fmt.Sprintf(`{"n":%d}`, i)]; n != 1 {
			t.Errorf("task %d delivered %d times, want exactly 1", i, n)
		}
	}
	if len(ok) != 600 {
		t.Errorf("%d deliveries, want 600", len(ok))
	}
}

// A 429 with Retry-After pauses every process: after the slots granted
// before it (at most max_wait's worth), nothing is released in the pause.
func TestRetryAfterPausesAllProcesses(t *testing.T) {
	// Not parallel: the timing claim needs the CPU to itself.
	sink := testsink.New()
	defer sink.Close()
	var mu sync.Mutex
	var throttledAt time.Time
	n := 0
	sink.OnRequest(func(h testsink.Hit) (int, time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		n++
		if n == 60 {
			throttledAt = h.At
			return 429, 2 * time.Second
		}
		return 0, 0
	})
	prefix := redistest.Prefix(t)
	enqueue(t, prefix, 200)
	cfg := httpConfig(t, prefix, sink.URL(), "50/s", 10, "200ms")
	procs := []*proc{startShaper(t, cfg), startShaper(t, cfg), startShaper(t, cfg)}
	waitFor(t, 60*time.Second, "200 deliveries", func() bool { return sink.Count() >= 200 })
	for _, p := range procs {
		p.stop(t)
	}
	mu.Lock()
	at := throttledAt
	mu.Unlock()
	// Slots granted before the 429 fire within max_wait (200ms) of it.
	from, to := at.Add(250*time.Millisecond), at.Add(1950*time.Millisecond)
	inside := 0
	for _, h := range sink.Hits() {
		if h.At.After(from) && h.At.Before(to) {
			inside++
		}
	}
	if inside != 0 {
		t.Errorf("%d requests inside the Retry-After pause (%v..%v after the 429), want 0", inside, 250*time.Millisecond, 1950*time.Millisecond)
	}
	seen := map[string]bool{}
	for _, h := range sink.OK() {
		seen[h.Payload] = true
	}
	if len(seen) != 200 {
		t.Errorf("%d distinct tasks delivered, want all 200 (the throttled one retried)", len(seen))
	}
}

func TestConfigErrorsExitBeforeStarting(t *testing.T) {
	t.Parallel()
	base := "redis: {url: \"redis://127.0.0.1:1\"}\nhttp: {listen: off}\n"
	ds := func(s string) string { return base + "downstreams:\n  - " + s + "\n" }
	cases := []struct{ config, want string }{
		{ds(`{name: api, rate: fast, handler: {type: log}}`), "downstreams[0].rate"},
		{ds(`{name: api, rate: 0/s, handler: {type: log}}`), "downstreams[0].rate"},
		{ds(`{name: "a b", rate: 5/s, handler: {type: log}}`), "downstreams[0].name"},
		{ds(`{name: api, rate: 5/s, workers: -1, handler: {type: log}}`), "downstreams[0].workers"},
		{ds(`{name: api, rate: 5/s, handler: {type: http}}`), "downstreams[0].handler.url"},
		{ds(`{name: api, rate: 5/s, handler: {type: smtp}}`), "downstreams[0].handler.type"},
		{ds(`{name: api, rate: 5/s, max_wait: soon, handler: {type: log}}`), "downstreams[0].max_wait"},
		{ds(`{name: api, rate: 5/s, max_wait: 1s, capacity: 5, handler: {type: log}}`), "downstreams[0]"},
		{ds(`{name: api, rate: 5/s, handler: {type: log}, admission: {on_reject: drop, limiters: [{rate: 1/s}]}}`), "downstreams[0].admission.on_reject"},
		{ds(`{name: api, rate: 5/s, handler: {type: log}, admission: {limiters: [{algorithm: gcra, rate: 1/s}]}}`), "downstreams[0].admission.limiters[0].algorithm"},
		{base + "downstreams: []\n", "downstreams"},
		{"redis: {url: \"http://x\"}\ndownstreams:\n  - {name: api, rate: 5/s, handler: {type: log}}\n", "redis.url"},
		{base + "colour: blue\n", "colour"},
		{ds(`{name: api, rate: 5/s, handler: {type: go}}`), "downstreams[0].handler"},
		{"redis: {url: \"redis://127.0.0.1:1\"}\nhttp: {listen: \"0.0.0.0:0\"}\ndownstreams:\n  - {name: api, rate: 5/s, handler: {type: log}}\n", "http.listen"},
		{ds(`{name: "..", rate: 5/s, handler: {type: log}}`), "downstreams[0].name"},
	}
	for i, c := range cases {
		path := filepath.Join(t.TempDir(), "bad.yaml")
		os.WriteFile(path, []byte(c.config), 0o600)
		cmd := exec.Command(shaperBin, "-config", path)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		msg := strings.TrimSpace(stderr.String())
		if err == nil {
			t.Errorf("case %d: exit 0, want non-zero (%s)", i, c.want)
			continue
		}
		if strings.Count(msg, "\n") != 0 || !strings.Contains(msg, c.want) {
			t.Errorf("case %d: stderr %q, want one line naming %q", i, msg, c.want)
		}
	}
}

// The README's first command: shaper with no config runs the quick start
// on an embedded Redis and shows releases.
func TestQuickStartShowsReleases(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(shaperBin, "-listen", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	released, summaries := 0, 0
	deadline := time.After(20 * time.Second)
	for released < 8 || summaries < 1 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("quick start exited early; stderr: %s", stderr.String())
			}
			if strings.Contains(l, "released task") {
				released++
			}
			if strings.Contains(l, "summary: released") {
				summaries++
			}
		case <-deadline:
			t.Fatalf("saw %d releases and %d summaries in 20s, want 8 and 1", released, summaries)
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	go io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		t.Errorf("quick start exit after SIGINT: %v, want 0 (stderr %s)", err, stderr.String())
	}
}

// daemonYAML is a test config for the shaper processes: the run's Redis
// under prefix, the HTTP server on a free port, a 5s shutdown, and
// downstreams (list items, as under `downstreams:`).
func daemonYAML(t *testing.T, prefix, downstreams string) string {
	return fmt.Sprintf("\nredis: {url: %q, prefix: %q}\nhttp: {listen: \"127.0.0.1:0\"}\nshutdown_timeout: 5s\ndownstreams:\n",
		redistest.URL(t), prefix) + downstreams
}
