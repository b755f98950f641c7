package lua

import "context"

var resetScript = script("reset.lua")

// Clear deletes keys (one downstream's, sharing its hash tag) in one
// script call (reset.lua) and reports, per key, whether it held state.
func (s *Store) Clear(ctx context.Context, keys ...string) ([]bool, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	v, err := s.ints(ctx, resetScript, keys, len(keys))
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(v))
	for i, n := range v {
		out[i] = n > 0
	}
	return out, nil
}

var breakerSet = script("prelude_clock.lua", "breakerset.lua")

// SetBreaker opens (open, for cooldown µs; maxCooldown µs sizes the TTL)
// or closes (counts forgotten) the breaker at key (breakerset.lua), and
// returns its state before (0 closed, 1 open, 2 half-open) and whether the
// key held state. now is µs since the epoch, 0 for Redis TIME.
func (s *Store) SetBreaker(ctx context.Context, key string, open bool, now, cooldown, maxCooldown int64) (before int64, existed bool, err error) {
	op := "close"
	if open {
		op = "open"
	}
	v, err := s.ints(ctx, breakerSet, []string{key}, 2, op, now, cooldown, maxCooldown)
	if err != nil {
		return 0, false, err
	}
	return v[0], v[1] == 1, nil
}
