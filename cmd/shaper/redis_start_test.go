package main_test

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runShaper runs shaper with config until it exits (at most limit) and
// returns its exit error, its last stderr line and how long it ran.
func runShaper(t *testing.T, config string, limit time.Duration) (error, string, time.Duration) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "shaper.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(shaperBin, "-config", path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(limit, func() { cmd.Process.Kill() })
	defer timer.Stop()
	err := cmd.Wait()
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	return err, lines[len(lines)-1], time.Since(start)
}

// rediss:// pointed at a plain-text Redis: shaper refuses to start, in one
// line that says what is wrong and where, instead of spinning a CPU core
// on "context deadline exceeded".
func TestRedissAgainstPlainRedisRefusesToStart(t *testing.T) {
	t.Parallel()
	srv, _ := ownRedis(t)
	cfg := "redis: {url: \"rediss://" + srv.Addr + "\", timeout: 500ms}\nhttp: {listen: off}\n" +
		"downstreams:\n  - {name: api, rate: 5/s, handler: {type: log}}\n"
	err, last, took := runShaper(t, cfg, 20*time.Second)
	if err == nil {
		t.Fatalf("exit 0, want non-zero; last line %q", last)
	}
	for _, want := range []string{"shaper: ", "TLS handshake failed", srv.Addr, "plain-text Redis", "redis://"} {
		if !strings.Contains(last, want) {
			t.Errorf("last stderr line %q, want it to contain %q", last, want)
		}
	}
	if took > 10*time.Second {
		t.Errorf("took %v to refuse, want < 10s", took)
	}
}

// A database index the server does not have is permanent: refuse at start.
func TestRedisDatabaseOutOfRangeRefusesToStart(t *testing.T) {
	t.Parallel()
	srv, _ := ownRedis(t)
	cfg := "redis: {url: \"redis://" + srv.Addr + "/99\"}\nhttp: {listen: off}\n" +
		"downstreams:\n  - {name: api, rate: 5/s, handler: {type: log}}\n"
	err, last, _ := runShaper(t, cfg, 20*time.Second)
	if err == nil {
		t.Fatalf("exit 0, want non-zero; last line %q", last)
	}
	if !strings.Contains(last, "redis.url") || !strings.Contains(last, "database 99 does not exist") {
		t.Errorf("last stderr line %q, want it to name redis.url and database 99", last)
	}
}

// blackHole accepts TCP connections and never answers: a Redis (or a TLS
// terminator) that hangs.
func blackHole(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				for _, c := range conns {
					c.Close()
				}
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return l.Addr().String()
}

// With every Redis call hanging (here: TLS handshakes that never finish),
// SIGINT still stops shaper within shutdown_timeout plus a small margin,
// not after each component waited out its own dial retries.
func TestShutdownBoundedWhenRedisHangs(t *testing.T) {
	t.Parallel()
	addr := blackHole(t)
	p := startShaper(t, "redis: {url: \"rediss://"+addr+"\", timeout: 500ms}\nhttp: {listen: off}\nshutdown_timeout: 2s\n"+
		"downstreams:\n  - {name: api, rate: 5/s, handler: {type: log}}\n")
	waitFor(t, 20*time.Second, "shaper started", func() bool { return strings.Contains(p.stderr.String(), "shaper started") })
	if s := p.stderr.String(); !strings.Contains(s, "TLS handshake with "+addr+" failed") {
		t.Errorf("stderr does not say the TLS handshake with %s failed:\n%s", addr, tail(s, 2000))
	}
	start := time.Now()
	p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
		p.done <- nil
	case <-time.After(20 * time.Second):
	}
	// shutdown_timeout 2s + 2s margin + 1s for a loaded machine.
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("shaper took %v to stop after SIGINT with shutdown_timeout 2s, want <= 5s", took)
	}
}

// Against a closed Redis port shaper runs, answers /readyz with 503, and
// says so in at most 2 warning lines in 10 s: every loop's failures and
// go-redis's dial errors fold into one line every 10 s.
func TestClosedRedisPortLogsLittle(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	p := startShaper(t, "redis: {url: \"redis://"+addr+"/0\"}\nhttp: {listen: \"127.0.0.1:0\"}\n"+
		"downstreams:\n  - {name: api, rate: 10/s, handler: {type: log}}\n")
	base := "http://" + httpAddr(t, p)
	waitFor(t, 10*time.Second, "/readyz answering 503", func() bool {
		res, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusServiceUnavailable
	})
	started := time.Now()
	// a fixed window to count in, not a wait for a condition
	time.Sleep(10*time.Second - time.Since(started))
	warns := strings.Count(p.stderr.String(), `"level":"WARN"`)
	t.Logf("%d warning lines in the first 10s against a closed port", warns)
	if warns > 2 {
		t.Errorf("%d warning lines in 10s against a closed Redis port, want at most 2:\n%s", warns, tail(p.stderr.String(), 3000))
	}
	if !strings.Contains(p.stderr.String(), addr) {
		t.Errorf("no warning names the Redis address %s", addr)
	}
}
