package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/cliflags"
	"github.com/shaper-io/shaper/internal/explain"
	"github.com/shaper-io/shaper/internal/plan"
	"github.com/shaper-io/shaper/internal/redisconn"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// ErrUsage marks a command-line mistake (exit code 2).
var ErrUsage = errors.New("usage")

const ctlUsage = `usage: shaper ctl -config FILE COMMAND [ARGS]   (flags may also follow the command)
commands:
  status                 every downstream: rates, pause, backlog (JSON)
  pause NAME             stop releases of NAME in every process (nothing more is taken; tasks waiting
                         for a slot go back to the queue; none is dropped)
  resume NAME            undo pause
  rate NAME RATE         override NAME's rate in every process, e.g. 20/s (a bare 20 is 20/s)
  rate NAME clear        remove the override (back to the configured or scheduled rate)
  reset NAME             clear every hold on NAME (its bucket's next_free, the limit its answers
                         announced, its quotas' counts): releases resume at the rate now
  breaker NAME open|close|clear
                         open NAME's circuit breaker now, or close it (clear: the same), every process
  mode NAME [LIMITER] M  run NAME's shaping (or its admission limiter LIMITER) in M: shadow, enforce,
                         or clear (back to the config's mode); every process within a second
  cancel [NAME] ID       cancel task ID (of NAME, or of whichever downstream holds it): deleted if it
                         waits; cut where it runs if taken
  explain [NAME] ID      why task ID is where it is (scheduled until, retry after an error, its
                         priority, its fair-share turn) and what holds its downstream now
  key NAME KEY rate RATE|weight W|pause|resume|clear
                         one admission key of fair downstream NAME, every process within a second:
                         its own ceiling (RATE, or clear) or weight in place of the config's, pause
                         its tasks (the other keys keep the rate), resume, or clear every setting
  key NAME               the key controls set on NAME (JSON)
  help                   this text
flags:
  -config FILE           the YAML config every shaper process runs (required; its redis and downstreams)
exit status: 0 done, 1 the command failed (Redis, the config), 2 a usage error`

// ctlFlag is what hoistFlags moves to the front: a flag and, unless
// given as -flag=value, its value.
var ctlFlag = map[string]bool{"-config": true, "--config": true}

// hoistFlags moves the flags found after the command to the front, so
// that "ctl rate api 20 -config x.yaml" reads as "ctl -config x.yaml rate
// api 20" (the flag package stops at the first argument).
func hoistFlags(args []string) []string {
	var flags, rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, _, hasValue := strings.Cut(a, "=")
		switch {
		case ctlFlag[name] && hasValue:
			flags = append(flags, a)
		case ctlFlag[name] && i+1 < len(args):
			flags = append(flags, a, args[i+1])
			i++
		case a == "-h" || a == "-help" || a == "--help":
			flags = append(flags, a)
		default:
			rest = append(rest, a)
		}
	}
	return append(flags, rest...)
}

// Ctl runs "shaper ctl": runtime control straight through Redis, for an
// operator on a machine that can reach it.
func Ctl(ctx context.Context, args []string, out io.Writer) error {
	// Redis errors reach the operator in the command's one line
	redisconn.Quiet()
	fs := flag.NewFlagSet("shaper ctl", flag.ContinueOnError)
	path := fs.String("config", "", "path to the YAML config file (required)")
	if help, err := parseSubcommand(fs, hoistFlags(args), ctlUsage, out); help || err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 || rest[0] == "help" {
		fmt.Fprintln(out, ctlUsage)
		return nil
	}
	if *path == "" {
		return fmt.Errorf("%w: -config FILE is required (see shaper ctl help)", ErrUsage)
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

// ctlCall is one ctl command being run: rest[0] is its name, the rest
// its arguments.
type ctlCall struct {
	ctx  context.Context
	rest []string
	pl   *plan.Plan
	rdb  redis.UniversalClient
	ctl  *shaping.Control
	out  io.Writer
}

// ctlCommands is every ctl command, in the order ctl's usage lists them;
// ctlCommand runs exactly these ("help" is answered before any is run).
var ctlCommands = []struct {
	name string
	run  func(c *ctlCall) error
}{
	{"status", (*ctlCall).status},
	{"pause", (*ctlCall).pause},
	{"resume", (*ctlCall).pause},
	{"rate", (*ctlCall).rate},
	{"reset", (*ctlCall).reset},
	{"breaker", (*ctlCall).breaker},
	{"mode", (*ctlCall).mode},
	{"cancel", (*ctlCall).cancel},
	{"explain", (*ctlCall).explain},
	{"key", (*ctlCall).key},
	{"help", nil},
}

// CtlCommandNames lists the ctl commands, for usage lines and errors.
func CtlCommandNames() string {
	names := make([]string, len(ctlCommands))
	for i, c := range ctlCommands {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}

// ctlCommand runs one ctl command, rest[0], with its arguments.
func ctlCommand(ctx context.Context, rest []string, pl *plan.Plan, rdb redis.UniversalClient, out io.Writer) error {
	c := &ctlCall{ctx: ctx, rest: rest, pl: pl, rdb: rdb, ctl: shaping.NewControl(rdb, pl.Prefix), out: out}
	for _, cmd := range ctlCommands {
		if cmd.name == rest[0] && cmd.run != nil {
			return cmd.run(c)
		}
	}
	return fmt.Errorf("%w: unknown command %q (commands: %s)", ErrUsage, rest[0], CtlCommandNames())
}

// need checks that the command has n words, its own name included, and
// that the second names a configured downstream.
func (c *ctlCall) need(n int) error {
	if len(c.rest) != n {
		return fmt.Errorf("%w: %q takes %d argument(s) (see shaper ctl help)", ErrUsage, c.rest[0], n-1)
	}
	if _, ok := c.pl.Downstream(c.rest[1]); !ok {
		return fmt.Errorf("%w: unknown downstream %q (the config has %s)", ErrUsage, c.rest[1], downstreamNames(c.pl))
	}
	return nil
}

// byID lets "cancel ID" and "explain ID" name no downstream: the one that
// holds the task is found (rest becomes NAME ID).
func (c *ctlCall) byID() error {
	if len(c.rest) == 2 {
		ds, err := queue.NewInspector(c.rdb, c.pl.Prefix).Find(c.pl.Names(), c.rest[1])
		if err != nil {
			return err
		}
		c.rest = []string{c.rest[0], ds, c.rest[1]}
	}
	return c.need(3)
}

func (c *ctlCall) status() error {
	if len(c.rest) != 1 {
		return fmt.Errorf("%w: \"status\" takes no arguments, got %q (see shaper ctl help)", ErrUsage, c.rest[1:])
	}
	return ctlStatus(c.ctx, c.ctl, queue.NewInspector(c.rdb, c.pl.Prefix), c.pl, c.out)
}

// pause runs pause and resume.
func (c *ctlCall) pause() error {
	if err := c.need(2); err != nil {
		return err
	}
	act, did := c.ctl.Pause, "paused"
	if c.rest[0] == "resume" {
		act, did = c.ctl.Resume, "resumed"
	}
	if err := act(c.ctx, c.rest[1]); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "%s %s\n", did, c.rest[1])
	return nil
}

func (c *ctlCall) rate() error {
	if err := c.need(3); err != nil {
		return err
	}
	name, text := c.rest[1], c.rest[2]
	var l limiters.Limit
	if text != "clear" {
		var err error
		if l, err = cliflags.ParseRate(text); err != nil {
			return fmt.Errorf("%w: %v", ErrUsage, err)
		}
		pd, _ := c.pl.Downstream(name)
		if err := pd.Shaping.CheckRate(l); err != nil {
			return fmt.Errorf("%w: %s", ErrUsage, refusedRate(name, text, err))
		}
	}
	if err := c.ctl.SetRate(c.ctx, name, l); err != nil {
		return err
	}
	if l.IsZero() {
		fmt.Fprintf(c.out, "%s: override removed\n", name)
	} else {
		fmt.Fprintf(c.out, "%s: rate overridden to %s in every process\n", name, l.RateString())
	}
	return nil
}

func (c *ctlCall) mode() error { return ctlMode(c.ctx, c.ctl, c.pl, c.rest, c.out) }

func (c *ctlCall) reset() error {
	if err := c.need(2); err != nil {
		return err
	}
	return ctlReset(c.ctx, c.pl, c.rdb, c.rest[1], c.out)
}

func (c *ctlCall) breaker() error {
	if err := c.need(3); err != nil {
		return err
	}
	return ctlBreaker(c.ctx, c.pl, c.rdb, c.rest[1], c.rest[2], c.out)
}

func (c *ctlCall) cancel() error {
	if err := c.byID(); err != nil {
		return err
	}
	name, id := c.rest[1], c.rest[2]
	st, err := queue.NewInspector(c.rdb, c.pl.Prefix).Cancel(name, id)
	if err != nil {
		return err
	}
	if st == asynq.TaskStateActive {
		fmt.Fprintf(c.out, "%s: task %s is active: cancelling it where it runs (removed unsent, or its call cut if under way)\n", name, id)
		return nil
	}
	fmt.Fprintf(c.out, "%s: task %s cancelled (it was %s)\n", name, id, st)
	return nil
}

func (c *ctlCall) explain() error {
	if err := c.byID(); err != nil {
		return err
	}
	e, err := explain.Task(c.ctx, queue.NewInspector(c.rdb, c.pl.Prefix), c.rdb, c.pl.Prefix, c.rest[1], c.rest[2], time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "%s: task %s is %s (priority %d): %s\n", e.Downstream, e.ID, e.State, e.Priority, e.Text)
	if e.Held != nil {
		fmt.Fprintf(c.out, "  what holds %s now: %s: %s\n", e.Downstream, e.Held.Label, e.Held.Text)
	} else if e.Reason == explain.Queued || e.Reason == explain.FairTurn {
		fmt.Fprintf(c.out, "  what holds %s now: unknown (no shaper process serving it announced in the last 10s)\n", e.Downstream)
	}
	return nil
}

// downstreamNames lists pl's downstreams for an error message.
func downstreamNames(pl *plan.Plan) string { return strings.Join(pl.Names(), ", ") }

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
