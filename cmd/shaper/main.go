// Command shaper is the shaping dispatcher: it releases queued tasks to
// their downstreams at fixed rates, globally across every shaper process.
//
// Without -config it runs the quick start on an embedded Redis.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	_ "time/tzdata" // schedules name time zones; work on hosts without tzdata

	"github.com/shaper-io/shaper/internal/app"
	"github.com/shaper-io/shaper/internal/cliflags"
)

// command is one of shaper's commands. run gets the arguments after the
// command's name, with the shaper flags given before it that it takes
// (takes) put first: "shaper -config F ctl status" runs ctl with
// "-config=F status".
type command struct {
	name  string
	takes []string
	run   func(ctx context.Context, args []string, stdout io.Writer) error
}

// commands is every command shaper accepts, in the order its usage lists
// them; nothing else runs one.
var commands = []command{
	{name: "ctl", takes: []string{"config"}, run: func(ctx context.Context, args []string, out io.Writer) error {
		return app.Ctl(ctx, args, out)
	}},
	{name: "replay", takes: []string{"config"}, run: func(ctx context.Context, args []string, out io.Writer) error {
		return app.Replay(ctx, args, os.Stdin, out)
	}},
	{name: "version", run: func(_ context.Context, args []string, out io.Writer) error {
		if len(args) > 0 {
			return fmt.Errorf("%w: version takes no arguments, got %q", app.ErrUsage, args[0])
		}
		fmt.Fprintln(out, app.Version())
		return nil
	}},
	{name: "help"}, // the usage, as -h
}

func commandNames() string {
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}

func usageText() string {
	return `Usage:
  shaper -config FILE [-listen ADDR]  run the dispatcher and the HTTP API for a config
                                      (-listen or ` + app.ListenEnv + ` replaces http.listen: several processes on one host, one file)
  shaper [-listen ADDR]               without -config: the quick start (embedded Redis, a demo downstream)
  shaper ctl -config FILE COMMAND     runtime control through Redis: ` + app.CtlCommandNames() + ` (shaper ctl help)
  shaper replay -config FILE ARRIVALS.jsonl   what the config would have done with a log of past arrivals (offline)
  shaper version                      the version and the commit it was built from (also -version)

Subcommands:
  ctl        runtime control of every shaper process sharing the config's Redis
  replay     replay recorded arrivals through a config's admission and shaping, on an embedded Redis
  version    print the version
  help       print this text (also -h)

A subcommand's -config may also come before it: shaper -config FILE ctl status.

Environment:
  ` + app.ListenEnv + `   the HTTP address, as -listen (the flag wins; both win over http.listen)

Exit status: 0 after a graceful stop, 1 on a config or start-up error, 2 on a usage error.

Flags:
`
}

type options struct {
	configPath, listen string
	version            bool
	cmd                *command // nil: run the dispatcher or the quick start
	cmdArgs            []string
}

// flagSet defines shaper's flags into o.
func flagSet(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("shaper", flag.ContinueOnError)
	fs.StringVar(&o.configPath, "config", "", "path to the YAML config file (without it: quick start on an embedded Redis)")
	fs.StringVar(&o.listen, "listen", "", "HTTP listen address (or "+app.ListenEnv+"): with -config in place of http.listen, without it the quick start's (default 127.0.0.1:8080)")
	fs.BoolVar(&o.version, "version", false, "print the version and exit (as shaper version)")
	return fs
}

// parseArgs reads the shaper flags and the command after them, if any. It
// refuses a word that is not a command: a stray word must not make shaper
// ignore the flags after it (the flag package stops at the first one) and
// start the quick start instead.
func parseArgs(args []string, stdout io.Writer) (options, error) {
	var o options
	fs := flagSet(&o)
	if err := cliflags.Parse(fs, args, stdout, usageText()); err != nil {
		return o, err
	}
	if fs.NArg() == 0 {
		return o, nil
	}
	i := slices.IndexFunc(commands, func(c command) bool { return c.name == fs.Arg(0) })
	if i < 0 {
		return o, fmt.Errorf("unexpected argument %q: shaper takes flags and at most one command, one of %s (see shaper -h)", fs.Arg(0), commandNames())
	}
	o.cmd = &commands[i]
	if o.cmd.run == nil { // help
		return o, cliflags.Parse(fs, []string{"-h"}, stdout, usageText())
	}
	var err error
	fs.Visit(func(f *flag.Flag) {
		if err == nil && !slices.Contains(o.cmd.takes, f.Name) {
			err = fmt.Errorf("-%s is not a flag of shaper %s (see shaper %s -h)", f.Name, o.cmd.name, o.cmd.name)
		}
		o.cmdArgs = append(o.cmdArgs, "-"+f.Name+"="+f.Value.String())
	})
	o.cmdArgs = append(o.cmdArgs, fs.Args()[1:]...)
	return o, err
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run runs shaper with args and returns its exit status.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseArgs(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "shaper:", err)
		return 2
	}
	if o.version {
		fmt.Fprintln(stdout, app.Version())
		return 0
	}
	if o.cmd != nil {
		if err := o.cmd.run(context.Background(), o.cmdArgs, stdout); err != nil {
			fmt.Fprintf(stderr, "shaper %s: %v\n", o.cmd.name, err)
			if errors.Is(err, app.ErrUsage) {
				return 2
			}
			return 1
		}
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	listen := app.ListenOf(o.listen, os.Getenv(app.ListenEnv))
	if o.configPath == "" {
		err = app.QuickStart(ctx, stdout, app.QuickStartOptions{Listen: listen.Addr, ListenFrom: listen.From})
	} else {
		err = app.RunConfigFile(ctx, o.configPath, listen)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(stderr, "shaper:", err)
		return 1
	}
	return 0
}
