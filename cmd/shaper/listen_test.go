package main_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/redistest"
)

// envWithout is the test's environment without SHAPER_LISTEN, plus extra.
func envWithout(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SHAPER_LISTEN=") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

func writeConfig(t *testing.T, doc string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "shaper.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Processes on one host run the same file, each on its own address: the
// -listen flag, else SHAPER_LISTEN, replaces http.listen, and the flag
// wins over the variable. All three serve /healthz at once.
func TestListenFlagOverridesTheConfig(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, strings.Replace(daemonYAML(t, redistest.Prefix(t), "  - {name: api, rate: 5/s, handler: {type: log}}\n"),
		`listen: "127.0.0.1:0"`, `listen: "127.0.0.1:1"`, 1)) // the file's own address is never used (port 1: not ours to bind)
	flagAddr, envAddr, bothAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	for _, c := range []struct {
		args []string
		env  []string
	}{
		{[]string{"-listen", flagAddr}, nil},
		{nil, []string{"SHAPER_LISTEN=" + envAddr}},
		{[]string{"-listen", bothAddr}, []string{"SHAPER_LISTEN=127.0.0.1:1"}},
	} {
		cmd := exec.Command(shaperBin, append([]string{"-config", path}, c.args...)...)
		cmd.Env = envWithout(c.env...)
		var stderr syncBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
			if t.Failed() {
				t.Logf("shaper %v %v stderr:\n%s", c.args, c.env, tail(stderr.String(), 2000))
			}
		})
	}
	for _, addr := range []string{flagAddr, envAddr, bothAddr} {
		waitFor(t, 15*time.Second, "/healthz on "+addr, func() bool {
			resp, err := http.Get("http://" + addr + "/healthz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == 200
		})
	}
}

// A taken address stops shaper at start with one line that names where
// the address came from (http.listen in the file, -listen or
// SHAPER_LISTEN) and how to give the process another.
func TestListenAddressInUseNamesItsSource(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := ln.Addr().String()
	doc := daemonYAML(t, redistest.Prefix(t), "  - {name: api, rate: 5/s, handler: {type: log}}\n")
	inFile := writeConfig(t, strings.Replace(doc, `listen: "127.0.0.1:0"`, fmt.Sprintf("listen: %q", taken), 1))
	free := writeConfig(t, doc)
	for _, c := range []struct {
		path string
		args []string
		env  []string
		from string
	}{
		{inFile, nil, nil, "http.listen in " + inFile},
		{free, nil, []string{"SHAPER_LISTEN=" + taken}, "SHAPER_LISTEN"},
		{free, []string{"-listen", taken}, []string{"SHAPER_LISTEN=" + freeAddr(t)}, "-listen"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, shaperBin, append([]string{"-config", c.path}, c.args...)...)
		cmd.Env = envWithout(c.env...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		cancel()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		// the last line: a JSON log line or two may come before it
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		last := lines[len(lines)-1]
		if code != 1 {
			t.Errorf("from %s: exit %d (%v), want 1; stderr %q", c.from, code, err, stderr.String())
		}
		for _, want := range []string{"shaper: ", taken, "bind: address already in use", "(the address is from " + c.from + ";",
			"with -listen ADDR or SHAPER_LISTEN=ADDR"} {
			if !strings.Contains(last, want) {
				t.Errorf("from %s: last stderr line %q, want it to contain %q", c.from, last, want)
			}
		}
	}
}
