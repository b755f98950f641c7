package app

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/plan"
)

// parseSubcommand parses a subcommand's flags: -h prints usage to out and
// reports help (no error); a bad flag is a usage error with the usage.
func parseSubcommand(fs *flag.FlagSet, args []string, usage string, out io.Writer) (help bool, err error) {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) { // asked for: print it, no error
			fmt.Fprintln(out, usage)
			return true, nil
		}
		return false, fmt.Errorf("%w: %v\n%s", ErrUsage, err, usage)
	}
	return false, nil
}

// loadPlan loads the config at path and builds its plan.
func loadPlan(path string) (*plan.Plan, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	return plan.Build(cfg)
}
