package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shaper-io/shaper/internal/app"
	"github.com/shaper-io/shaper/internal/redistest"
)

// shaper -h names every command run accepts, and shaper ctl -h every ctl
// command: both lists come from the tables the commands are run by.
func TestHelpListsEveryCommand(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if code := run([]string{"-h"}, &out, &errOut); code != 0 {
		t.Fatalf("shaper -h: exit %d, stderr %q", code, errOut.String())
	}
	for _, c := range commands {
		if !strings.Contains(out.String(), "\n  "+c.name+" ") {
			t.Errorf("shaper -h does not list the command %q:\n%s", c.name, out.String())
		}
	}
	flagSet(&options{}).VisitAll(func(f *flag.Flag) {
		if !strings.Contains(out.String(), "  -"+f.Name) {
			t.Errorf("shaper -h does not list the flag -%s:\n%s", f.Name, out.String())
		}
	})
	if !strings.Contains(strings.ToLower(out.String()), "exit") {
		t.Errorf("shaper -h does not give the exit codes:\n%s", out.String())
	}
	out.Reset()
	if code := run([]string{"ctl", "-h"}, &out, &errOut); code != 0 {
		t.Fatalf("shaper ctl -h: exit %d, stderr %q", code, errOut.String())
	}
	names := strings.Split(app.CtlCommandNames(), ", ")
	if len(names) < 10 {
		t.Fatalf("CtlCommandNames() = %q: fewer commands than ctl has", app.CtlCommandNames())
	}
	for _, name := range names {
		if !strings.Contains(out.String(), "\n  "+name+" ") {
			t.Errorf("shaper ctl -h does not list the command %q:\n%s", name, out.String())
		}
	}
	if !strings.Contains(out.String(), "-config FILE") || !strings.Contains(out.String(), "exit status:") {
		t.Errorf("shaper ctl -h lacks its flag -config or the exit codes:\n%s", out.String())
	}
}

// A flag of a command may come before it ("shaper -config F ctl status"),
// as after it; an unknown command's error lists every command.
func TestFlagsBeforeTheCommand(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "shaper.yaml")
	doc := fmt.Sprintf("redis: {url: %q, prefix: %q}\ndownstreams:\n  - {name: api, rate: 5/s, handler: {type: log}}\n",
		redistest.URL(t), redistest.Prefix(t))
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, args := range [][]string{
		{"-config", path, "ctl", "status"},
		{"-config=" + path, "ctl", "status"},
		{"ctl", "status", "-config", path},
		{"ctl", "-config", path, "status"},
	} {
		var out, errOut bytes.Buffer
		code := run(args, &out, &errOut)
		var st struct {
			Downstreams []struct{ Name string } `json:"downstreams"`
		}
		if code != 0 || json.Unmarshal(out.Bytes(), &st) != nil || len(st.Downstreams) != 1 || st.Downstreams[0].Name != "api" {
			t.Errorf("step %d: shaper %q: exit %d, stdout %q, stderr %q; want 0 and the status of api", i, args, code, out.String(), errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"-config", path, "ctl", "pause", "api"}, &out, &errOut); code != 0 || out.String() != "paused api\n" {
		t.Errorf("shaper -config F ctl pause api: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
	for _, c := range []struct {
		args  []string
		names []string
	}{
		{[]string{"-config", path, "frobnicate"}, nil},
		{[]string{"-config", path, "ctl", "frobnicate"}, strings.Split(app.CtlCommandNames(), ", ")},
	} {
		errOut.Reset()
		if code := run(c.args, &out, &errOut); code != 2 {
			t.Errorf("shaper %q: exit %d, want 2", c.args, code)
		}
		names := c.names
		if names == nil {
			for _, cmd := range commands {
				names = append(names, cmd.name)
			}
		}
		for _, name := range names {
			if !strings.Contains(errOut.String(), name) {
				t.Errorf("shaper %q: stderr %q does not name the command %q", c.args, errOut.String(), name)
			}
		}
	}
}
