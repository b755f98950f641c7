package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/testsink"
	"github.com/shaper-io/shaper/queue"
)

// Three shaper processes, one fair downstream at 500/s with key_rate
// 5/s, 100 tenants × 20 tasks. While they are released, the shaper ctl
// command (the binary) caps t000 at 1/s and pauses t001: counted at the
// release, t000 has at most 2 releases in any second from 1s after the
// command, t001 none from 1.5s after it until it is cleared, and every
// other tenant stays within its key_rate + 1 = 6 and gets all its tasks
// meanwhile. After ctl key … clear, every task is delivered, each once.
func TestCtlKeyThreeProcesses(t *testing.T) {
	_, rdb := ownRedis(t)
	sink := testsink.New()
	defer sink.Close()
	const tenants, tasks = 100, 20
	cfg := fmt.Sprintf(`
redis: {url: %q, prefix: kctl}
http: {listen: "127.0.0.1:0"}
shutdown_timeout: 5s
downstreams:
  - name: api
    rate: 500/s
    fairness: {key: tenant, key_rate: 5/s}
    handler: {type: http, url: %q, timeout: 5s}
`, "redis://"+rdb.Options().Addr+"/0", sink.URL())
	path := filepath.Join(t.TempDir(), "shaper.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctl := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(shaperBin, append([]string{"ctl", "-config", path}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("shaper ctl %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	procs := []*proc{startShaper(t, cfg), startShaper(t, cfg), startShaper(t, cfg)}
	for _, pr := range procs {
		httpAddr(t, pr)
	}
	p := keyCeilingProducer(t, rdb, cfg)
	for i := range tasks {
		for k := range tenants {
			b, _ := json.Marshal(tenantTask{fmt.Sprintf("t%03d", k), i})
			if _, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Key: fmt.Sprintf("t%03d", k), Payload: b}); err != nil {
				t.Fatal(err)
			}
		}
	}
	byKey := func() map[string][]time.Time {
		m := map[string][]time.Time{}
		for _, h := range sink.OK() {
			var tt tenantTask
			if json.Unmarshal([]byte(h.Payload), &tt) == nil {
				m[tt.T] = append(m[tt.T], h.Wake)
			}
		}
		for _, ts := range m {
			sortTimes(ts)
		}
		return m
	}
	waitFor(t, 30*time.Second, "releases of t000 and t001", func() bool { m := byKey(); return len(m["t000"]) >= 2 && len(m["t001"]) >= 2 })
	ctl("key", "api", "t000", "rate", "1/s")
	ctl("key", "api", "t001", "pause")
	cmdAt := time.Now()
	waitFor(t, 60*time.Second, "the other tenants' tasks, and 6s since the commands", func() bool {
		m := byKey()
		for k := 2; k < tenants; k++ {
			if len(m[fmt.Sprintf("t%03d", k)]) < tasks {
				return false
			}
		}
		return time.Since(cmdAt) > 6*time.Second
	})
	clearAt := time.Now()
	ctl("key", "api", "t000", "clear")
	ctl("key", "api", "t001", "clear")
	m := byKey()
	between := func(ts []time.Time, from, to time.Time) []time.Time {
		var out []time.Time
		for _, x := range ts {
			if !x.Before(from) && x.Before(to) {
				out = append(out, x)
			}
		}
		return out
	}
	capped := between(m["t000"], cmdAt.Add(time.Second), clearAt)
	if most := testsink.MaxInWindow(capped, time.Second); most > 2 || len(capped) < 3 {
		t.Errorf("t000 at 1/s: %d released from 1s after the command, at most %d in any second; want some, at most 2", len(capped), most)
	}
	if held := between(m["t001"], cmdAt.Add(1500*time.Millisecond), clearAt); len(held) > 0 {
		t.Errorf("t001 paused: %d releases from 1.5s after the pause until the clear, want none", len(held))
	}
	worst := 0
	for k := 2; k < tenants; k++ {
		worst = max(worst, testsink.MaxInWindow(m[fmt.Sprintf("t%03d", k)], time.Second))
	}
	if worst > 6 {
		t.Errorf("another tenant had %d releases in one second, want at most key_rate + 1 = 6", worst)
	}
	t.Logf("t000: %d of %d by the clear (%d from 1s after the rate); t001: %d by the clear; others: most %d in a second",
		len(between(m["t000"], time.Time{}, clearAt)), tasks, len(capped), len(between(m["t001"], time.Time{}, clearAt)), worst)
	waitFor(t, 60*time.Second, "every task after the clears", func() bool { return len(sink.OK()) >= tenants*tasks })
	seen := map[tenantTask]int{}
	for _, h := range sink.OK() {
		var tt tenantTask
		if err := json.Unmarshal([]byte(h.Payload), &tt); err != nil {
			t.Fatalf("payload %q: %v", h.Payload, err)
		}
		seen[tt]++
	}
	for tt, n := range seen {
		if n != 1 {
			t.Errorf("%s #%d delivered %d times", tt.T, tt.N, n)
		}
	}
	if len(seen) != tenants*tasks {
		t.Errorf("%d tasks delivered, want %d", len(seen), tenants*tasks)
	}
	for _, pr := range procs {
		pr.stop(t)
	}
}
