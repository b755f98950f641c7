package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/shaper-io/shaper/internal/app"
	"github.com/shaper-io/shaper/internal/config"
)

func ctlConfig(t *testing.T) string {
	t.Helper()
	srv := startRedis(t)
	path := filepath.Join(t.TempDir(), "shaper.yaml")
	doc := "redis: {url: \"redis://" + srv.Addr + "\"}\ndownstreams:\n  - {name: api, rate: 5/s, handler: {type: log}}\n"
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Every key of `shaper ctl status` is snake_case, the backlog's included.
func TestCtlStatusSnakeCase(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := app.Ctl(context.Background(), []string{"-config", ctlConfig(t), "status"}, &out); err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("status is not JSON: %v\n%s", err, out.String())
	}
	snake := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	var walk func(v any, path string)
	walk = func(v any, path string) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if !snake.MatchString(k) {
					t.Errorf("key %q at %s is not snake_case", k, path)
				}
				walk(x, path+"."+k)
			}
		case []any:
			for _, x := range v {
				walk(x, path+"[]")
			}
		}
	}
	walk(v, "")
	if !strings.Contains(out.String(), `"pending": 0`) {
		t.Errorf("status has no backlog pending count:\n%s", out.String())
	}
}

// A bad rate reads as it does in the config file.
func TestCtlRateMessage(t *testing.T) {
	t.Parallel()
	err := app.Ctl(context.Background(), []string{"-config", ctlConfig(t), "rate", "api", "1e309/s"}, &bytes.Buffer{})
	if !errors.Is(err, app.ErrUsage) || !strings.Contains(err.Error(), `invalid rate "1e309/s": exponents are not supported`) ||
		strings.Contains(err.Error(), "limiters:") {
		t.Errorf("ctl rate api 1e309/s: %v, want a usage error `invalid rate \"1e309/s\": exponents are not supported`", err)
	}
}

// type: go in a config run by the shaper command points at something that
// exists.
func TestGoHandlerErrorPointsAtExample(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte("redis: {url: \"redis://127.0.0.1:1\"}\nhttp: {listen: off}\ndownstreams:\n  - {name: api, rate: 5/s, handler: {type: go}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	err = app.Run(context.Background(), cfg, app.Options{})
	if err == nil || !strings.Contains(err.Error(), "downstreams[0].handler") || !strings.Contains(err.Error(), "examples/batchwrites") {
		t.Fatalf("Run: %v, want an error naming downstreams[0].handler and examples/batchwrites", err)
	}
	if _, serr := os.Stat("../../examples/batchwrites"); serr != nil {
		t.Errorf("the message points at examples/batchwrites: %v", serr)
	}
}

// pause and resume say what they did, and status shows it.
func TestCtlPauseResume(t *testing.T) {
	t.Parallel()
	cfg := ctlConfig(t)
	paused := func() bool {
		t.Helper()
		var out bytes.Buffer
		if err := app.Ctl(context.Background(), []string{"-config", cfg, "status"}, &out); err != nil {
			t.Fatal(err)
		}
		return strings.Contains(out.String(), `"paused": true`)
	}
	for i, step := range []struct {
		cmd, want string
		paused    bool
	}{{"pause", "paused api\n", true}, {"resume", "resumed api\n", false}} {
		var out bytes.Buffer
		if err := app.Ctl(context.Background(), []string{"-config", cfg, step.cmd, "api"}, &out); err != nil {
			t.Fatalf("step %d: ctl %s api: %v", i, step.cmd, err)
		}
		if out.String() != step.want {
			t.Errorf("step %d: ctl %s api printed %q, want %q", i, step.cmd, out.String(), step.want)
		}
		if got := paused(); got != step.paused {
			t.Errorf("step %d: after ctl %s, status paused %v, want %v", i, step.cmd, got, step.paused)
		}
	}
	if err := app.Ctl(context.Background(), []string{"-config", cfg, "resume", "nope"}, &bytes.Buffer{}); !errors.Is(err, app.ErrUsage) {
		t.Errorf("ctl resume nope: %v, want a usage error (unknown downstream)", err)
	}
}
