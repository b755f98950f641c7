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
	"os"
	"os/signal"
	"syscall"
	_ "time/tzdata" // schedules name time zones; work on hosts without tzdata

	"github.com/shaper-io/shaper/internal/app"
)

func main() {
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
	fs := flag.NewFlagSet("shaper", flag.ContinueOnError)
	configPath := fs.String("config", "", "path to the YAML config file (without it: quick start on an embedded Redis)")
	listen := fs.String("listen", "", "HTTP listen address for the quick start (default 127.0.0.1:8080)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if *configPath == "" {
		err = app.QuickStart(ctx, os.Stdout, app.QuickStartOptions{Listen: *listen})
	} else {
		err = app.RunConfigFile(ctx, *configPath)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "shaper:", err)
		os.Exit(1)
	}
}
