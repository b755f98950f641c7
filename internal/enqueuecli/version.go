package enqueuecli

import "github.com/shaper-io/shaper/internal/version"

// Version is the command's version line, as shaper version prints its
// own (version.Line).
func Version() string { return version.Line("enqueue") }
