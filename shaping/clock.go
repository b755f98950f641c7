package shaping

import (
	"sync"
	"time"
)

// clockOffset estimates local time minus Redis time from script replies.
// Each sample (reply received locally − Redis TIME in the script) is the
// true offset plus the reply's travel time, which is never negative, so
// the smallest recent sample is the best estimate and never below the true
// offset. Sleeping until slot+estimate therefore never releases before the
// slot, and a reply that was slow to arrive does not push the release late.
type clockOffset struct {
	mu         sync.Mutex
	cur, prev  time.Duration
	have       bool
	epochStart time.Time
}

// epoch bounds how long an old minimum is trusted (clocks drift).
const offsetEpoch = 30 * time.Second

func (c *clockOffset) observe(sample time.Duration, now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.have {
		c.cur, c.prev, c.have, c.epochStart = sample, sample, true, now
	}
	if now.Sub(c.epochStart) > offsetEpoch {
		c.prev, c.cur, c.epochStart = c.cur, sample, now
	}
	c.cur = min(c.cur, sample)
	return min(c.cur, c.prev)
}

// get is the current estimate (0 before any sample).
func (c *clockOffset) get() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return min(c.cur, c.prev)
}
