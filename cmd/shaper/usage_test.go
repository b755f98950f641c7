package main_test

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// A stray positional argument is a usage error (exit 2, one line): it must
// not make shaper drop the flags after it and start the quick start. -h,
// --help and help print the usage, subcommands included, and exit 0.
func TestUsage(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args       []string
		code       int
		stdout     []string // parts of stdout
		stderrLine string   // part of the one stderr line; "" means no stderr
	}{
		{[]string{"extra-arg", "-config", "prod.yaml"}, 2, nil, `shaper: unexpected argument "extra-arg": shaper takes flags and at most one command, one of ctl, replay, version, help (see shaper -h)`},
		{[]string{"-config", "prod.yaml", "extra"}, 2, nil, `shaper: unexpected argument "extra"`},
		{[]string{"-bogus"}, 2, nil, "shaper: flag provided but not defined: -bogus (see shaper -h)"},
		{[]string{"-listen", "127.0.0.1:0", "ctl", "status"}, 2, nil, "shaper: -listen is not a flag of shaper ctl (see shaper ctl -h)"},
		{[]string{"version", "extra"}, 2, nil, `shaper version: usage: version takes no arguments, got "extra"`},
		{[]string{"version"}, 0, []string{"shaper "}, ""},
		{[]string{"-version"}, 0, []string{"shaper "}, ""},
		{[]string{"-h"}, 0, []string{"Subcommands:", "  ctl ", "shaper ctl -config FILE COMMAND", "-config string", "-listen string", "SHAPER_LISTEN"}, ""},
		{[]string{"--help"}, 0, []string{"Subcommands:", "-config string"}, ""},
		{[]string{"help"}, 0, []string{"Subcommands:", "-config string"}, ""},
		{[]string{"ctl", "-h"}, 0, []string{"usage: shaper ctl -config FILE COMMAND", "status"}, ""},
	}
	for _, c := range cases {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cmd := exec.CommandContext(ctx, shaperBin, c.args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Errorf("%v: still running after 10s (started the quick start?); stdout %q", c.args, stdout.String())
			continue
		}
		if code != c.code {
			t.Errorf("%v: exit %d, want %d; stdout %q stderr %q", c.args, code, c.code, stdout.String(), stderr.String())
		}
		for _, want := range c.stdout {
			if !strings.Contains(stdout.String(), want) {
				t.Errorf("%v: stdout %q, want it to contain %q", c.args, stdout.String(), want)
			}
		}
		switch {
		case c.stderrLine == "" && stderr.Len() > 0:
			t.Errorf("%v: stderr %q, want none", c.args, stderr.String())
		case c.stderrLine != "" && (strings.Count(stderr.String(), "\n") != 1 || !strings.Contains(stderr.String(), c.stderrLine)):
			t.Errorf("%v: stderr %q, want one line containing %q", c.args, stderr.String(), c.stderrLine)
		}
	}
}
