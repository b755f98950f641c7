package app_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/shaper-io/shaper/internal/app"
)

// The ctl conventions: a bare `ctl` and `ctl help` print the usage (with
// its flags and exit codes) and succeed; flags may follow the command;
// an unknown downstream lists the config's; a usage error is one line.
func TestCtlConventions(t *testing.T) {
	t.Parallel()
	path := ctlConfig(t)
	for _, args := range [][]string{nil, {"help"}, {"-h"}} {
		var out bytes.Buffer
		if err := app.Ctl(context.Background(), args, &out); err != nil {
			t.Errorf("ctl %q: %v, want the usage and no error", args, err)
		}
		for _, want := range []string{"breaker NAME", "reset NAME", "flags:", "exit status"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("ctl %q: usage lacks %q:\n%s", args, want, out.String())
			}
		}
	}
	var out bytes.Buffer
	if err := app.Ctl(context.Background(), []string{"pause", "api", "-config", path}, &out); err != nil || !strings.Contains(out.String(), "paused api") {
		t.Errorf("ctl pause api -config FILE: %v, %q; want the flag read after the command", err, out.String())
	}
	if err := app.Ctl(context.Background(), []string{"resume", "api", "-config=" + path}, &out); err != nil {
		t.Errorf("ctl resume api -config=FILE: %v", err)
	}
	err := app.Ctl(context.Background(), []string{"-config", path, "pause", "nope"}, &out)
	if !errors.Is(err, app.ErrUsage) || !strings.Contains(err.Error(), "(the config has api)") || strings.Contains(err.Error(), "\n") {
		t.Errorf("ctl pause nope: %v; want one usage line listing the downstreams", err)
	}
	err = app.Ctl(context.Background(), []string{"-config", path, "frobnicate"}, &out)
	if !errors.Is(err, app.ErrUsage) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "breaker") {
		t.Errorf("ctl frobnicate: %v; want one usage line naming the commands", err)
	}
	err = app.Ctl(context.Background(), []string{"pause", "api"}, &out)
	if !errors.Is(err, app.ErrUsage) || !strings.Contains(err.Error(), "-config") {
		t.Errorf("ctl pause api without -config: %v", err)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	if v := app.Version(); !strings.HasPrefix(v, "shaper ") || !strings.Contains(v, "go1.") {
		t.Errorf("Version() = %q, want \"shaper <version> go1.x\"", v)
	}
}
