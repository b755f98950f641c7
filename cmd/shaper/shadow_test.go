package main_test

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/redistest"
)

// Real processes: two shaper daemons take tasks over HTTP through an
// admission limiter in shadow (every task 202), `shaper ctl mode` (a third
// process) switches it to enforce, and within a second both daemons answer
// 429.
func TestModeSwitchReachesEveryDaemon(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	cfg := daemonYAML(t, prefix, `  - name: api
    rate: 100/s
    handler: {type: log}
    admission:
      limiters: [{name: tb, rate: 2/s, burst: 2, mode: shadow}]
`)
	path := filepath.Join(t.TempDir(), "shaper.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var bases []string
	for range 2 {
		bases = append(bases, "http://"+httpAddr(t, startShaper(t, cfg)))
	}
	var switched atomic.Int64
	first := make([]atomic.Int64, len(bases))
	var early, accepted atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, base := range bases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C: // the clients' pace
				}
				resp, err := http.Post(base+"/v1/downstreams/api/tasks", "application/json", strings.NewReader(`{"key":"k","payload":1}`))
				if err != nil {
					continue
				}
				resp.Body.Close()
				switch {
				case resp.StatusCode == 202:
					accepted.Add(1)
				case resp.StatusCode == 429 && switched.Load() == 0:
					early.Add(1)
				case resp.StatusCode == 429:
					first[i].CompareAndSwap(0, time.Now().UnixNano())
				}
			}
		}()
	}
	waitFor(t, 10*time.Second, "40 tasks accepted through the shadow limiter", func() bool { return accepted.Load() >= 40 })
	out, err := exec.Command(shaperBin, "ctl", "-config", path, "mode", "api", "tb", "enforce").CombinedOutput()
	at := time.Now() // the ctl process has written the switch and exited
	switched.Store(at.UnixNano())
	if err != nil || !strings.Contains(string(out), "enforce in every process") {
		t.Fatalf("shaper ctl mode: %v\n%s", err, out)
	}
	waitFor(t, 5*time.Second, "a 429 from every daemon", func() bool {
		for i := range first {
			if first[i].Load() == 0 {
				return false
			}
		}
		return true
	})
	close(stop)
	wg.Wait()
	if n := early.Load(); n > 0 {
		t.Errorf("%d rejections while the limiter was in shadow, want none", n)
	}
	for i := range first {
		took := time.Unix(0, first[i].Load()).Sub(at)
		t.Logf("daemon %d: first 429 %s after shaper ctl mode returned", i, took.Round(time.Millisecond))
		if took > time.Second {
			t.Errorf("daemon %d answered its first 429 %s after the switch, want within 1s", i, took)
		}
	}
}
