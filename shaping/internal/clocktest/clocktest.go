// Package clocktest forwards to internal/clocktest, the fake clock that
// the limiters, queue and shaping tests share. New code imports
// github.com/shaper-io/shaper/internal/clocktest.
package clocktest

import (
	"time"

	"github.com/shaper-io/shaper/internal/clocktest"
)

// Fake is clocktest.Fake.
type Fake = clocktest.Fake

// New is clocktest.New.
func New(start time.Time) *Fake { return clocktest.New(start) }
