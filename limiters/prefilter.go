package limiters

import (
	"context"
	"sync"
	"time"

	"github.com/shaper-io/shaper/clock"
)

// Prefilter rejects a key in-process, without a Redis round trip, until the
// RetryAfter of its last rejection has passed. It only ever rejects what the
// wrapped limiter would reject (a rejection stands until RetryAfter), so it
// saves round trips for clients that keep hammering while over their limit.
//
// Its memory is bounded: at most MaxKeys keys are remembered; past that,
// expired entries are dropped and then new rejections are not cached.
// The zero Prefilter is not usable: NewPrefilter builds one.
type Prefilter struct {
	next    Limiter
	maxKeys int
	clock   clock.Clock

	mu    sync.Mutex
	until map[string]blocked
}

type blocked struct {
	until time.Time
	cost  int64 // the rejected cost; a smaller one may fit sooner
	res   Result
}

var _ Limiter = (*Prefilter)(nil)

// NewPrefilter wraps next. maxKeys <= 0 means 100,000. clk is the clock
// a block runs out on; nil means clock.Real, and tests pass a fake one.
func NewPrefilter(next Limiter, maxKeys int, clk clock.Clock) *Prefilter {
	if maxKeys <= 0 {
		maxKeys = 100_000
	}
	return &Prefilter{next: next, maxKeys: maxKeys, clock: clock.Or(clk), until: make(map[string]blocked)}
}

// Peek is Allow without a charge.
func (p *Prefilter) Peek(ctx context.Context, key string, cost int64) (Result, error) {
	return p.do(ctx, key, cost, p.next.Peek)
}

// Allow rejects locally while key is blocked, and otherwise asks next. The
// Result's Cancel runs next's and forgets any local block of key: the
// refund may have made room the block does not know about.
func (p *Prefilter) Allow(ctx context.Context, key string, cost int64) (Result, error) {
	res, err := p.do(ctx, key, cost, p.next.Allow)
	if err != nil || !res.Allowed {
		return res, err
	}
	return res.WithCancel(func(ctx context.Context) error {
		p.mu.Lock()
		delete(p.until, key)
		p.mu.Unlock()
		return res.Cancel(ctx)
	}), nil
}

// Blocked reports how many keys are blocked now (for metrics and tests).
func (p *Prefilter) Blocked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.until)
}

func (p *Prefilter) do(ctx context.Context, key string, cost int64, f func(context.Context, string, int64) (Result, error)) (Result, error) {
	now := p.clock.Now()
	p.mu.Lock()
	b, ok := p.until[key]
	if ok && now.Before(b.until) && cost >= b.cost {
		p.mu.Unlock()
		res := b.res
		res.RetryAfter = b.until.Sub(now)
		res.Remaining = 0
		res.Shadow = nil // no layer was asked this time
		return res, nil
	}
	if ok && !now.Before(b.until) {
		delete(p.until, key)
	}
	p.mu.Unlock()

	res, err := f(ctx, key, cost)
	if err == nil && !res.Allowed && res.RetryAfter > 0 {
		p.mu.Lock()
		if len(p.until) >= p.maxKeys {
			for k, v := range p.until {
				if !now.Before(v.until) {
					delete(p.until, k)
				}
			}
		}
		if len(p.until) < p.maxKeys {
			// Only costs at least this large are blocked: a smaller one
			// may fit sooner, so it still asks Redis.
			p.until[key] = blocked{until: now.Add(res.RetryAfter), cost: cost, res: res}
		}
		p.mu.Unlock()
	}
	return res, err
}
