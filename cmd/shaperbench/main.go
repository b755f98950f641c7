// Command shaperbench measures shaper against what users would pick
// instead (asynq's rate-limit recipe, redis_rate gating asynq, raw asynq)
// on its own throwaway redis-server, prints Markdown tables and writes the
// results as JSON. See internal/bench and docs/benchmarks.md.
//
//	go run ./cmd/shaperbench -quick      # scenarios 1-6 in 2-3 minutes on a busy 2-core machine, 7 adds a few
//	go run ./cmd/shaperbench             # the full run, about 10 minutes there
//	go run ./cmd/shaperbench -rounds economy,keepup,idle,kill,fair,priority
//	                                     # the release path only (scenario 7), about 6-7 minutes
//	go run ./cmd/shaperbench -rounds fair # a late small tenant with and without fair share, about 80 s
//	go run ./cmd/shaperbench -rounds priority # urgent tasks behind a backlog, priority next to FIFO and with fair share, about 50 s
//	go run ./cmd/shaperbench -rounds keyrate # key_rate 2/s over 10,000 tenants × 6 tasks at 1000/s × 3 processes, about 80 s
//	                                     # (-keyrate-control: and the same load without key_rate, as much again)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/shaper-io/shaper/internal/bench"
)

func main() {
	fs := flag.NewFlagSet("shaperbench", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "smaller backlogs, key counts and timings")
	jsonPath := fs.String("json", filepath.Join(os.TempDir(), "shaperbench.json"), "write the results as JSON here (\"\" to skip)")
	scenarios := fs.String("scenarios", strings.Join(bench.AllScenarios(), ","), "comma-separated scenarios to run")
	contenders := fs.String("contenders", strings.Join(bench.AllContenders(), ","), "comma-separated contenders of the fidelity scenario")
	mode := fs.String("shaper", bench.ModeProcesses, "how shaper runs in the fidelity scenario: processes (real `shaper` OS processes) or dispatchers (separate Dispatchers in this process)")
	bin := fs.String("shaper-bin", "", "prebuilt shaper binary (default: go build ./cmd/shaper)")
	rate := fs.Int("rate", 0, "fidelity rate per second (default 50)")
	backlog := fs.Int("backlog", 0, "fidelity backlog (default 1500, -quick 300)")
	procs := fs.String("procs", "1,3", "process counts of the fidelity scenario")
	rounds := fs.String("rounds", strings.Join(bench.AllRounds(), ","), "comma-separated rounds of the release scenario; given without -scenarios, only the release scenario runs")
	idle := fs.String("idle-downstreams", "1,100,500", "downstream counts of the idle round")
	econ := fs.String("economy-rates", "50,200,1000", "rates (per second) of the economy round")
	keyControl := fs.Bool("keyrate-control", false, "round keyrate also runs the same load without key_rate (fair share alone), for comparison")
	fsTenants := fs.Int("fairscale-tenants", 0, "tenants of round fairscale's equal run (default 10)")
	fsTasks := fs.Int("fairscale-tasks", 0, "tasks per tenant of round fairscale's equal run (default 500, -quick 250)")
	prioFair := fs.Bool("priority-fair", true, "round priority also runs strict and weighted priority with fair share over 10 tenants")
	quiet := fs.Bool("q", false, "no progress lines on stderr")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["rounds"] && !set["scenarios"] {
		*scenarios = bench.ScenarioRelease
	}
	opts := bench.Options{Quick: *quick, Scenarios: split(*scenarios), Contenders: split(*contenders),
		ShaperMode: *mode, ShaperBin: *bin, Rate: *rate, Backlog: *backlog,
		Command: "go run ./cmd/shaperbench " + strings.Join(os.Args[1:], " ")}
	opts.Procs = counts("procs", *procs, "a process count")
	opts.ReleaseRounds = split(*rounds)
	opts.IdleLevels = counts("idle-downstreams", *idle, "a downstream count")
	opts.EconomyRates = counts("economy-rates", *econ, "a rate")
	opts.KeyRate.Control = *keyControl
	opts.FairScale.Tenants, opts.FairScale.Tasks = *fsTenants, *fsTasks
	opts.Priority.Fair = *prioFair
	if !*quiet {
		opts.Progress = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.Run(ctx, opts)
	if rep != nil {
		fmt.Print(rep.Markdown())
		if *jsonPath != "" {
			if werr := rep.WriteJSON(*jsonPath); werr != nil {
				err = errors.Join(err, werr)
			} else {
				fmt.Fprintf(os.Stderr, "shaperbench: results written to %s\n", *jsonPath)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "shaperbench:", err)
		os.Exit(1)
	}
}

// counts parses a comma-separated list of positive integers, or exits
// with one line naming the flag and the bad value.
func counts(flagName, s, what string) []int {
	var out []int
	for _, p := range split(s) {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "shaperbench: -%s: %q is not %s\n", flagName, p, what)
			os.Exit(2)
		}
		out = append(out, n)
	}
	return out
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
