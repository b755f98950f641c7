// Package cliflags parses a command's flags the way shaper's commands
// agree on: -h prints the usage text and the flags on stdout, and any
// other mistake is one line that points at -h. ParseRate reads a rate
// argument the same way in every command.
package cliflags

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/shaper-io/shaper/limiters"
)

// Parse parses args into fs. On -h or -help it writes usage and fs's flag
// defaults to help and returns flag.ErrHelp; any other parse error comes
// back as "<error> (see <fs name> -h)", and nothing is printed.
func Parse(fs *flag.FlagSet, args []string, help io.Writer, usage string) error {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {} // a usage error is one line; -h prints the help below
	err := fs.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		io.WriteString(help, usage)
		fs.SetOutput(help)
		fs.PrintDefaults()
		return flag.ErrHelp
	}
	return fmt.Errorf("%v (see %s -h)", err, fs.Name())
}

// ParseRate reads a rate argument with limiters.ParseLimit, which reads
// every rate shaper takes ("100/s", "5000/m", "10/500ms", "1/1d", or a bare
// number per second: "20" is 20/s). Its errors are ParseLimit's without the
// package's prefix, e.g. `invalid rate "fast" (want <number>/<unit>, e.g.
// 50/s)`, but for a bare number that is not positive: `rate must be
// positive, got "0"`.
func ParseRate(s string) (limiters.Limit, error) {
	if f, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil && f <= 0 {
		return limiters.Limit{}, fmt.Errorf("rate must be positive, got %q", s) // the words the CLIs have always used
	}
	l, err := limiters.ParseLimit(s)
	if err != nil {
		return l, errors.New(strings.TrimPrefix(err.Error(), limiters.ErrInvalidLimit.Error()+": "))
	}
	return l, nil
}
