package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/plan"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// ErrUsage marks a command-line mistake (exit code 2).
var ErrUsage = errors.New("usage")

const ctlUsage = `usage: shaper ctl -config FILE COMMAND
commands:
  status                 every downstream: rates, pause, backlog (JSON)
  pause NAME             stop releases of NAME in every process (tasks are held, never dropped)
  resume NAME            undo pause
  rate NAME RATE         override NAME's rate in every process, e.g. 20/s
  rate NAME clear        remove the override (back to the configured or scheduled rate)
  reset NAME             clear every hold on NAME (its bucket's next_free, the limit its answers
                         announced, its quotas' counts): releases resume at the rate now
  breaker NAME open|close|clear
                         open NAME's circuit breaker now, or close it (clear: the same), every process
  mode NAME [LIMITER] M  run NAME's shaping (or its admission limiter LIMITER) in M: shadow, enforce,
                         or clear (back to the config's mode); every process within a second`

// Ctl runs "shaper ctl": runtime control straight through Redis, for an
// operator on a machine that can reach it.
func Ctl(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("shaper ctl", flag.ContinueOnError)
	path := fs.String("config", "", "path to the YAML config file (required)")
	if help, err := parseSubcommand(fs, args, ctlUsage, out); help || err != nil {
		return err
	}
	rest := fs.Args()
	if *path == "" || len(rest) == 0 {
		return fmt.Errorf("%w: -config and a command are required\n%s", ErrUsage, ctlUsage)
	}
	pl, err := loadPlan(*path)
	if err != nil {
		return err
	}
	if pl.Redis.Embedded() {
		return fmt.Errorf("%w: ctl needs redis.url, cluster or sentinel in the config (the embedded Redis lives inside one shaper process)", ErrUsage)
	}
	rdb, closeRedis, err := OpenRedis(pl.Redis)
	if err != nil {
		return err
	}
	defer closeRedis()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return ctlCommand(ctx, rest, pl, rdb, out)
}

// ctlCommand runs one ctl command, rest[0], with its arguments.
func ctlCommand(ctx context.Context, rest []string, pl *plan.Plan, rdb redis.UniversalClient, out io.Writer) error {
	ctl := shaping.NewControl(rdb, pl.Prefix)
	need := func(n int) error {
		if len(rest) != n {
			return fmt.Errorf("%w: %q takes %d argument(s)\n%s", ErrUsage, rest[0], n-1, ctlUsage)
		}
		if _, ok := pl.Downstream(rest[1]); !ok {
			return fmt.Errorf("%w: unknown downstream %q", ErrUsage, rest[1])
		}
		return nil
	}
	switch rest[0] {
	case "status":
		return ctlStatus(ctx, ctl, queue.NewInspector(rdb, pl.Prefix), pl, out)
	case "pause", "resume":
		if err := need(2); err != nil {
			return err
		}
		act, did := ctl.Pause, "paused"
		if rest[0] == "resume" {
			act, did = ctl.Resume, "resumed"
		}
		if err := act(ctx, rest[1]); err != nil {
			return err
		}
		fmt.Fprintf(out, "%s %s\n", did, rest[1])
	case "rate":
		if err := need(3); err != nil {
			return err
		}
		var l limiters.Limit
		if rest[2] != "clear" {
			var err error
			if l, err = limiters.ParseLimit(rest[2]); err != nil {
				return fmt.Errorf("%w: %s", ErrUsage, rateReason(err))
			}
		}
		if err := ctl.SetRate(ctx, rest[1], l); err != nil {
			return err
		}
		if l.IsZero() {
			fmt.Fprintf(out, "%s: override removed\n", rest[1])
		} else {
			fmt.Fprintf(out, "%s: rate overridden to %s in every process\n", rest[1], l.RateString())
		}
	case "mode":
		return ctlMode(ctx, ctl, pl, rest, out)
	case "reset":
		if err := need(2); err != nil {
			return err
		}
		return ctlReset(ctx, pl, rdb, rest[1], out)
	case "breaker":
		if err := need(3); err != nil {
			return err
		}
		return ctlBreaker(ctx, pl, rdb, rest[1], rest[2], out)
	default:
		return fmt.Errorf("%w: unknown command %q\n%s", ErrUsage, rest[0], ctlUsage)
	}
	return nil
}

// ctlStatus prints every downstream's rates, pause and backlog as JSON.
func ctlStatus(ctx context.Context, ctl *shaping.Control, in *queue.Inspector, pl *plan.Plan, out io.Writer) error {
	var all []map[string]any
	for _, pd := range pl.Downstreams {
		name := pd.Shaping.Name
		st, err := ctl.State(ctx, name)
		if err != nil {
			return err
		}
		b, err := in.Backlog(name)
		if err != nil {
			return err
		}
		row := map[string]any{"name": name, "configured_rate": pd.Written.Rate, "paused": st.Paused, "backlog": toBacklogJSON(b)}
		if !st.Override.IsZero() {
			row["override_rate"] = st.Override.RateString()
		}
		row["modes"] = modesOf(&pd, st)
		if st.Adaptive > 0 {
			row["adaptive_rate_per_second"] = st.Adaptive
		}
		all = append(all, row)
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(map[string]any{"downstreams": all})
}
