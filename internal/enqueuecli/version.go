package enqueuecli

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the command's version line, as shaper version prints its
// own: the module version (or "devel"), the commit it was built from when
// the build recorded one, and the Go version.
func Version() string {
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
	return fmt.Sprintf("enqueue %s %s", v, runtime.Version())
}
