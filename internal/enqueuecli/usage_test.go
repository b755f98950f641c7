package enqueuecli

import (
	"bytes"
	"context"
	"flag"
	"strings"
	"testing"
)

// enqueue -h (and help) lists every flag the command defines, and the exit
// codes; --version (and version) prints the version line; both exit 0
// without reading stdin or a config.
func TestHelpListsEveryFlag(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("enqueue", flag.ContinueOnError)
	(&options{}).define(fs)
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		var out, errb bytes.Buffer
		code := Main(context.Background(), args, IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
		if code != ExitOK || errb.Len() > 0 {
			t.Errorf("enqueue %q: exit %d, stderr %q; want 0 and none", args, code, errb.String())
		}
		fs.VisitAll(func(f *flag.Flag) {
			if !strings.Contains(out.String(), "\n  -"+f.Name) {
				t.Errorf("enqueue %q: usage lacks -%s", args, f.Name)
			}
		})
		if !strings.Contains(out.String(), "Exit codes:") || !strings.Contains(out.String(), "130 interrupted") {
			t.Errorf("enqueue %q: usage lacks the exit codes", args)
		}
	}
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		var out, errb bytes.Buffer
		code := Main(context.Background(), args, IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
		if code != ExitOK || !strings.HasPrefix(out.String(), "enqueue ") || !strings.Contains(out.String(), "go1.") || errb.Len() > 0 {
			t.Errorf("enqueue %q: exit %d, stdout %q, stderr %q; want 0 and \"enqueue <version> go1.x\"", args, code, out.String(), errb.String())
		}
	}
}
