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
	"syscall"
	_ "time/tzdata" // schedules name time zones; work on hosts without tzdata

	"github.com/shaper-io/shaper/internal/app"
	"github.com/shaper-io/shaper/internal/cliflags"
)

const usageText = `Usage:
  shaper -config shaper.yaml [-listen ADDR]   run the dispatcher and the HTTP API for a config
                                     (-listen replaces http.listen: several processes on one host, one file)
  shaper [-listen ADDR]              without -config: the quick start (embedded Redis, a demo downstream)
  shaper ctl -config FILE COMMAND    runtime control through Redis: ` + app.CtlCommands + ` (shaper ctl help)
  shaper replay -config FILE ARRIVALS.jsonl   what the config would have done with a log of past arrivals (offline)
  shaper version                     the version and the commit it was built from

Subcommands:
  ctl        runtime control of every shaper process sharing the config's Redis
  replay     replay recorded arrivals through a config's admission and shaping, on an embedded Redis
  version    print the version

Exit status: 0 after a graceful stop, 1 on a config or start-up error, 2 on a usage error.

Flags:
`

type options struct {
	configPath, listen string
}

// parseArgs reads the daemon's flags. It refuses any positional argument:
// a stray word must not make shaper ignore the flags after it (the flag
// package stops at the first one) and start the quick start instead.
func parseArgs(args []string, stdout io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("shaper", flag.ContinueOnError)
	fs.StringVar(&o.configPath, "config", "", "path to the YAML config file (without it: quick start on an embedded Redis)")
	fs.StringVar(&o.listen, "listen", "", "HTTP listen address: the quick start's (default 127.0.0.1:8080), or with -config in place of http.listen")
	if err := cliflags.Parse(fs, args, stdout, usageText); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q: shaper takes only flags, or a subcommand (ctl, replay) before them (see shaper -h)", fs.Arg(0))
	}
	return o, nil
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "help" {
		os.Args[1] = "-h"
	}
	if len(os.Args) == 2 && (os.Args[1] == "version" || os.Args[1] == "-version" || os.Args[1] == "--version") {
		fmt.Println(app.Version())
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "ctl" {
		if err := app.Ctl(context.Background(), os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "shaper ctl:", err)
			if errors.Is(err, app.ErrUsage) {
				os.Exit(2)
			}
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "replay" {
		if err := app.Replay(context.Background(), os.Args[2:], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "shaper replay:", err)
			if errors.Is(err, app.ErrUsage) {
				os.Exit(2)
			}
			os.Exit(1)
		}
		return
	}
	o, err := parseArgs(os.Args[1:], os.Stdout)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "shaper:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.configPath == "" {
		err = app.QuickStart(ctx, os.Stdout, app.QuickStartOptions{Listen: o.listen})
	} else {
		err = app.RunConfigFile(ctx, o.configPath, o.listen)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "shaper:", err)
		os.Exit(1)
	}
}
