// Package cliflags parses a command's flags the way shaper's commands
// agree on: -h prints the usage text and the flags on stdout, and any
// other mistake is one line that points at -h.
package cliflags

import (
	"errors"
	"flag"
	"fmt"
	"io"
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
