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
