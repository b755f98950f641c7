package main_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/enqueuecli"
	"github.com/shaper-io/shaper/internal/testsink"
)

// A shaper process releases two downstreams at 20/s, each behind a
// backlog of 60 tasks enqueued with the enqueue CLI; then 100 updates of
// one collapse key arrive through the CLI within a second. keep_last
// reaches its downstream as one call carrying the last update, keep_first
// as one carrying the first; the CLI reports each line's outcome (one
// accepted, 99 collapsed into it) and every backlog task is delivered once.
func TestCollapseHundredUpdatesBehindABacklog(t *testing.T) {
	_, rdb := ownRedis(t)
	sinks := map[string]*testsink.Sink{"last": testsink.New(), "first": testsink.New()}
	for _, s := range sinks {
		defer s.Close()
	}
	cfg := fmt.Sprintf(`
redis: {url: %q, prefix: collapse}
http: {listen: "127.0.0.1:0"}
downstreams:
  - {name: last, rate: 20/s, collapse: keep_last, handler: {type: http, url: %q, timeout: 5s}}
  - {name: first, rate: 20/s, collapse: keep_first, handler: {type: http, url: %q, timeout: 5s}}
`, "redis://"+rdb.Options().Addr+"/0", sinks["last"].URL(), sinks["first"].URL())
	path := filepath.Join(t.TempDir(), "shaper.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cli := func(stdin string, args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := enqueuecli.Main(context.Background(), append([]string{"--config", path}, args...),
			enqueuecli.IO{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb})
		return code, errb.String()
	}
	const backlog, updates = 60, 100
	var lines, sync []string
	for i := range backlog {
		lines = append(lines, fmt.Sprintf(`{"payload":{"backlog":%d}}`, i))
	}
	for i := range updates {
		sync = append(sync, fmt.Sprintf(`{"payload":{"sync":%d},"collapse_key":"sync-tenant-7"}`, i))
	}
	for ds := range sinks {
		if code, stderr := cli(strings.Join(lines, "\n"), "--downstream", ds); code != 0 {
			t.Fatalf("backlog of %s: exit %d: %s", ds, code, stderr)
		}
	}
	pr := startShaper(t, cfg)
	httpAddr(t, pr)
	start := time.Now()
	for ds := range sinks {
		code, stderr := cli(strings.Join(sync, "\n"), "--downstream", ds, "-v")
		if code != 0 || strings.Count(stderr, ": collapsed into ") != updates-1 ||
			!strings.Contains(stderr, fmt.Sprintf("%d tasks in ", updates)) || !strings.Contains(stderr, ": 1 accepted, 0 deferred, 0 rejected, 99 collapsed into waiting tasks") {
			t.Errorf("%s: the updates: exit %d, stderr %s; want a line per update, 1 accepted and 99 collapsed", ds, code, tail(stderr, 600))
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Logf("the updates took %v to enqueue (the backlog drains in 3s)", d)
	}
	for ds, s := range sinks {
		waitFor(t, 30*time.Second, ds+": the backlog and the update", func() bool { return len(s.OK()) >= backlog+1 })
	}
	pr.stop(t)
	for ds, s := range sinks {
		var calls []string
		seen := map[string]int{}
		for _, h := range s.OK() {
			seen[h.Payload]++
			if strings.Contains(h.Payload, "sync") {
				calls = append(calls, h.Payload)
			}
		}
		want := fmt.Sprintf(`{"sync":%d}`, updates-1)
		if ds == "first" {
			want = `{"sync":0}`
		}
		if len(calls) != 1 || calls[0] != want {
			t.Errorf("%s: the downstream got %v, want one call with %s", ds, calls, want)
		}
		if len(seen) != backlog+1 {
			t.Errorf("%s: %d distinct calls, want the backlog's %d and one update", ds, len(seen), backlog)
		}
		for p, n := range seen {
			if n != 1 {
				t.Errorf("%s: %s delivered %d times", ds, p, n)
			}
		}
	}
}
