// Package version is the version line the commands print (shaper
// version, enqueue --version): the module version, the commit the binary
// was built from when the build recorded one, and the Go version.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Line is command's version line: "shaper v1.2.3 (0123456789ab) go1.26",
// "devel" for the module version of a build from a checkout, ", modified"
// after the commit when the tree had uncommitted changes.
func Line(command string) string {
	v, rev, dirty := "devel", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		v += " (" + rev
		if dirty {
			v += ", modified"
		}
		v += ")"
	}
	return fmt.Sprintf("%s %s %s", command, v, runtime.Version())
}
