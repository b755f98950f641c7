package app

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/plan"
	"github.com/shaper-io/shaper/internal/replay"
)

const replayUsage = `usage: shaper replay -config FILE [-json] [-decisions FILE] ARRIVALS.jsonl
Replays a JSON Lines log of past arrivals, one {"ts": …, "downstream": …, "key": …, "cost": …}
a line (ARRIVALS.jsonl, or - for stdin), through the config's admission and shaping, offline on
an embedded Redis, with the real scripts at each arrival's time, and prints what would have been
admitted, deferred and rejected, and how long the tasks would have waited for their slots.
Nothing is enqueued or sent; the config's redis section is not used.
flags:
  -config FILE      the config to try (required)
  -json             print the summary as JSON
  -decisions FILE   write one JSON line per arrival: its outcome, limiter, wait and slot`

// Replay runs "shaper replay".
func Replay(ctx context.Context, args []string, stdin io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("shaper replay", flag.ContinueOnError)
	path := fs.String("config", "", "")
	asJSON := fs.Bool("json", false, "")
	decisions := fs.String("decisions", "", "")
	if help, err := parseSubcommand(fs, args, replayUsage, out); help || err != nil {
		return err
	}
	if *path == "" || fs.NArg() != 1 {
		return fmt.Errorf("%w: -config and one arrivals file are required\n%s", ErrUsage, replayUsage)
	}
	pl, err := loadPlan(*path)
	if err != nil {
		return err
	}
	in := stdin
	if name := fs.Arg(0); name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrUsage, err)
		}
		defer f.Close()
		in = f
	}
	def := ""
	if len(pl.Downstreams) == 1 {
		def = pl.Downstreams[0].Shaping.Name
	}
	arrivals, err := replay.Parse(in, def)
	if err != nil {
		return err
	}
	ds, err := runReplay(ctx, pl, arrivals)
	if err != nil {
		return err
	}
	if *decisions != "" {
		if err := writeDecisions(*decisions, ds); err != nil {
			return err
		}
	}
	sums := replay.Summarize(pl, ds)
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"arrivals": len(arrivals), "downstreams": sums})
	}
	fmt.Fprintf(out, "replay of %d arrivals with %s\n", len(arrivals), *path)
	replay.Write(out, pl, sums)
	return nil
}

// runReplay replays on an embedded Redis of its own, started and stopped
// here: the replay writes limiter and bucket state at the log's times.
func runReplay(ctx context.Context, pl *plan.Plan, arrivals []replay.Arrival) ([]replay.Decision, error) {
	addr, stop, err := StartEmbedded()
	if err != nil {
		return nil, err
	}
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	return replay.Run(ctx, rdb, pl, arrivals)
}

func writeDecisions(name string, ds []replay.Decision) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, d := range ds {
		if err := enc.Encode(d); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
