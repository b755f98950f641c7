// Package clocktest forwards to internal/clocktest, where the fake clock
// moved so that the limiters and queue tests share it with shaping's.
// It stays only for branches written against the old path: import
// github.com/shaper-io/shaper/internal/clocktest instead.
package clocktest

import (
	"time"

	"github.com/shaper-io/shaper/internal/clocktest"
)

// Fake is clocktest.Fake.
type Fake = clocktest.Fake

// New is clocktest.New.
func New(start time.Time) *Fake { return clocktest.New(start) }
