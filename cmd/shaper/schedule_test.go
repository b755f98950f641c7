package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/testsink"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/shaping"
)

// Three processes run the same cron job: every tick is enqueued exactly once.
// Parallel: it counts ticks, not releases per second or latencies, and
// parallel tests only start once the package's timing tests are done.
func TestCronOneTaskPerTickAcrossProcesses(t *testing.T) {
	t.Parallel()
	sink := testsink.New()
	defer sink.Close()
	prefix := redistest.Prefix(t)
	cfg := fmt.Sprintf(`
redis: {url: %q, prefix: %q}
http: {listen: off}
downstreams:
  - {name: api, rate: 100/s, handler: {type: http, url: %q}}
cron:
  - name: tick
    schedule: "@every 1s"
    downstream: api
    payload: {job: nightly-import}
`, redistest.URL(t), prefix, sink.URL())
	procs := []*proc{startShaper(t, cfg), startShaper(t, cfg), startShaper(t, cfg)}
	idRE := regexp.MustCompile(`^cron:tick:(\d+)$`)
	ticks := func() map[int64]int {
		out := map[int64]int{}
		for _, h := range sink.OK() {
			if m := idRE.FindStringSubmatch(h.TaskID); m != nil {
				n, _ := strconv.ParseInt(m[1], 10, 64)
				out[n]++
			}
		}
		return out
	}
	waitFor(t, 30*time.Second, "12 ticks delivered", func() bool { return len(ticks()) >= 12 })
	for _, p := range procs {
		p.stop(t)
	}
	got := ticks()
	var secs []int64
	for s, n := range got {
		secs = append(secs, s)
		if n != 1 {
			t.Errorf("tick %d enqueued %d times, want exactly 1", s, n)
		}
	}
	sort.Slice(secs, func(i, j int) bool { return secs[i] < secs[j] })
	// Past the first tick (processes were still starting), ticks are
	// consecutive seconds: none missed.
	for i := 2; i < len(secs); i++ {
		if secs[i] != secs[i-1]+1 {
			t.Errorf("ticks %d and %d: a tick was missed", secs[i-1], secs[i])
		}
	}
	for _, h := range sink.OK() {
		if h.Payload != `{"job":"nightly-import"}` {
			t.Errorf("payload %q, want the configured one as JSON", h.Payload)
			break
		}
	}
}

var httpAddrRE = regexp.MustCompile(`"http":"([^"]+)"`)

func httpAddr(t *testing.T, p *proc) string {
	t.Helper()
	var addr string
	waitFor(t, 10*time.Second, "the HTTP address in the log", func() bool {
		m := httpAddrRE.FindStringSubmatch(p.stderr.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	return addr
}

// Runtime control: the ctl subcommand and the HTTP endpoints change every
// process; endpoints need the bearer token.
func TestControlPauseRateAndAuth(t *testing.T) { // not parallel: t.Setenv
	prefix := redistest.Prefix(t)
	cfg := fmt.Sprintf(`
redis: {url: %q, prefix: %q}
http: {listen: "127.0.0.1:0", token_env: SHAPER_TEST_TOKEN}
downstreams:
  - {name: api, rate: 10/s, handler: {type: log}}
`, redistest.URL(t), prefix)
	t.Setenv("SHAPER_TEST_TOKEN", "s3cret-token")
	p := startShaper(t, cfg)
	base := "http://" + httpAddr(t, p)
	if strings.Contains(p.stderr.String(), "s3cret-token") {
		t.Error("the bearer token appears in the log")
	}
	do := func(method, path, token, body string) (int, map[string]any) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, v
	}
	if code, _ := do("POST", "/v1/downstreams/api/pause", "", ""); code != 401 {
		t.Errorf("pause without token: %d, want 401", code)
	}
	if code, _ := do("POST", "/v1/downstreams/api/pause", "wrong", ""); code != 401 {
		t.Errorf("pause with a wrong token: %d, want 401", code)
	}
	if code, _ := do("POST", "/v1/downstreams/nope/pause", "s3cret-token", ""); code != 404 {
		t.Errorf("pause of an unknown downstream: %d, want 404", code)
	}
	if code, _ := do("PUT", "/v1/downstreams/api/rate", "s3cret-token", `{"rate":"fast"}`); code != 400 {
		t.Errorf("bad rate: %d, want 400", code)
	}
	if code, _ := do("PUT", "/v1/downstreams/api/rate", "s3cret-token", `{"rate":"25/s"}`); code != 200 {
		t.Errorf("rate override: %d, want 200", code)
	}
	if code, _ := do("POST", "/v1/downstreams/api/pause", "s3cret-token", ""); code != 200 {
		t.Errorf("pause: %d, want 200", code)
	}
	waitFor(t, 3*time.Second, "status shows the pause and the override", func() bool {
		code, v := do("GET", "/v1/downstreams", "s3cret-token", "")
		if code != 200 {
			return false
		}
		ds := v["downstreams"].([]any)[0].(map[string]any)
		return ds["paused"] == true && ds["override_rate"] == "25/s" && ds["rate_per_second"] == 25.0
	})
	// the same through the ctl subcommand
	path := filepath.Join(t.TempDir(), "ctl.yaml")
	os.WriteFile(path, []byte(cfg), 0o600)
	for _, args := range [][]string{{"resume", "api"}, {"rate", "api", "clear"}} {
		out, err := exec.Command(shaperBin, append([]string{"ctl", "-config", path}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("shaper ctl %v: %v: %s", args, err, out)
		}
	}
	waitFor(t, 3*time.Second, "status back to configured", func() bool {
		_, v := do("GET", "/v1/downstreams", "s3cret-token", "")
		ds := v["downstreams"].([]any)[0].(map[string]any)
		return ds["paused"] == false && ds["override_rate"] == nil && ds["rate_per_second"] == 10.0
	})
	// reset clears a parked bucket (a 1 h pushback) for every process
	rdb := redistest.Client(t)
	bs := shaping.NewBuckets(rdb, prefix)
	if _, err := bs.PushBack(context.Background(), shaping.Bucket{Name: "api", Rate: limiters.PerSecond(10)}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(shaperBin, "ctl", "-config", path, "reset", "api").CombinedOutput(); err != nil || !strings.Contains(string(out), "cleared bucket") {
		t.Fatalf("shaper ctl reset api: %v: %s", err, out)
	}
	if n := rdb.Exists(context.Background(), bs.Key("api")).Val(); n != 0 {
		t.Errorf("after ctl reset the bucket key still exists")
	}
	// a second reset finds nothing and says so, not "cleared"
	if out, err := exec.Command(shaperBin, "ctl", "-config", path, "reset", "api").CombinedOutput(); err != nil || !strings.Contains(string(out), "nothing to clear") {
		t.Fatalf("shaper ctl reset api, again: %v: %s", err, out)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(shaperBin, "ctl", "-config", path, "pause", "nope")
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), `unknown downstream "nope"`) {
		t.Errorf("ctl pause nope: %v %q, want an error naming the downstream", err, stderr.String())
	}
}
