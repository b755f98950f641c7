package app

import "github.com/shaper-io/shaper/internal/version"

// Version is shaper's version line (version.Line).
func Version() string { return version.Line("shaper") }
