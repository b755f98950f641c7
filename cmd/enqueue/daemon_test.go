package main_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/redistest"
)

var httpAddrRE = regexp.MustCompile(`"msg":"shaper started".*"http":"([^"]+)"`)

// The shaper daemon's HTTP API and the enqueue CLI, both real processes,
// share one admission state; the daemon keeps serving while Redis is down.
func TestDaemonAPIAndCLIShareAdmission(t *testing.T) {
	t.Parallel()
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop(); srv.Cleanup() })
	prefix := redistest.Prefix(t)
	cfg := writeFile(t, "shaper.yaml", fmt.Sprintf(`
redis: {url: "redis://%s", prefix: %q, timeout: 500ms}
http: {listen: "127.0.0.1:0", token_env: ENQUEUE_TEST_TOKEN, max_body: 2KiB}
shutdown_timeout: 2s
downstreams:
  - name: api
    rate: 1/s
    handler: {type: log}
    admission:
      limiters:
        - {name: tenant, rate: 1/h, burst: 5}
        - {name: everyone, algorithm: fixed_window, key: global, rate: 100/h}
`, srv.Addr, prefix))

	cmd := exec.Command(shaperBin, "-config", cfg)
	cmd.Env = append(os.Environ(), "ENQUEUE_TEST_TOKEN=tok-123")
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("shaper stderr:\n%s", tail(stderr.String(), 4000))
		}
	})
	var addr string
	waitFor(t, 20*time.Second, "shaper to start", func() bool {
		if m := httpAddrRE.FindStringSubmatch(stderr.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	})
	base := "http://" + addr
	post := func(body, token string) (*http.Response, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest("POST", base+"/v1/downstreams/api/tasks", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST: %v", err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		var m map[string]any
		json.Unmarshal(raw, &m)
		return res, m
	}

	// Three tasks of tenant t1 through the CLI, two through HTTP: the
	// bucket of 5 is empty.
	if r := run(t, lines(3, `{"downstream":"api","key":"t1","payload":%d}`), "--config", cfg, "--json"); r.code != 0 || num(t, r, "accepted") != 3 {
		t.Fatalf("enqueue: %s", r)
	}
	if res, _ := post(`{"key":"t1"}`, ""); res.StatusCode != 401 {
		t.Errorf("without the token: %d, want 401", res.StatusCode)
	}
	if res, _ := post(`{"key":"t1"}`, "wrong"); res.StatusCode != 401 {
		t.Errorf("with a wrong token: %d, want 401", res.StatusCode)
	}
	for i, remaining := range []string{"1", "0"} {
		res, body := post(`{"key":"t1","payload":{"via":"http"}}`, "tok-123")
		if res.StatusCode != 202 || body["id"] == nil || res.Header.Get("X-RateLimit-Remaining") != remaining {
			t.Fatalf("HTTP task %d: %d %v (remaining %q), want 202 with %s remaining", i, res.StatusCode, body, res.Header.Get("X-RateLimit-Remaining"), remaining)
		}
	}
	res, body := post(`{"key":"t1"}`, "tok-123")
	ra, _ := strconv.Atoi(res.Header.Get("Retry-After"))
	if res.StatusCode != 429 || ra < 3500 || ra > 3600 || body["limiter"] != "tenant" {
		t.Fatalf("6th task: %d %v (Retry-After %q), want 429 from tenant with about an hour", res.StatusCode, body, res.Header.Get("Retry-After"))
	}
	if got := res.Header.Get("RateLimit-Policy"); got != `"tenant";q=5;w=18000` {
		t.Errorf("RateLimit-Policy %q", got)
	}
	if got, want := res.Header.Get("RateLimit"), fmt.Sprintf(`"tenant";r=0;t=%d`, ra); got != want {
		t.Errorf("RateLimit %q, want %q", got, want)
	}
	if r := run(t, "", "--config", cfg, "--downstream", "api", "--key", "t1", "--payload", "x"); r.code != 1 {
		t.Errorf("the CLI after HTTP emptied the bucket: %s, want exit 1", r)
	}
	if res, _ := post(`{"key":"t2","payload":"`+strings.Repeat("x", 3000)+`"}`, "tok-123"); res.StatusCode != 413 {
		t.Errorf("3000-byte body over a 2KiB limit: %d, want 413", res.StatusCode)
	}

	// Redis goes away: 503 with Retry-After (admission fails closed), the
	// process stays up and healthy, and the CLI exits 3.
	srv.Stop()
	res, body = post(`{"key":"t2"}`, "tok-123")
	if res.StatusCode != 503 || res.Header.Get("Retry-After") != "1" || !strings.Contains(fmt.Sprint(body["error"]), "fail_closed") {
		t.Errorf("Redis down: %d %v, want 503 with Retry-After 1 naming fail_closed", res.StatusCode, body)
	}
	if res, err := http.Get(base + "/healthz"); err != nil || res.StatusCode != 200 {
		t.Errorf("/healthz with Redis down: %v %v", res, err)
	}
	if r := run(t, "", "--config", cfg, "--downstream", "api", "--key", "t2", "--payload", "x"); r.code != 3 {
		t.Errorf("the CLI with Redis down: %s, want exit 3", r)
	}
	select {
	case err := <-exited:
		t.Fatalf("shaper exited while Redis was down: %v", err)
	default:
	}
	if err := srv.StartAgain(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "a 202 after Redis came back", func() bool {
		res, _ := post(`{"key":"t3"}`, "tok-123")
		return res.StatusCode == 202
	})
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("shaper exit after SIGTERM: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Errorf("shaper did not stop within 20s of SIGTERM")
	}
	if strings.Contains(stderr.String(), "panic") {
		t.Errorf("shaper stderr mentions a panic")
	}
}
