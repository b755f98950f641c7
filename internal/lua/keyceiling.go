package lua

import (
	"context"
	"fmt"
)

var keyCeiling = script("keyceiling.lua")

// KeyCeilingArgs are keyceiling.lua's arguments. Its KEYS are the tat
// STRINGs of the candidates' keys (keys.Space.KeyCeiling), each once.
type KeyCeilingArgs struct {
	// Interval is ARGV[1]: µs a slot taken moves its key's tat past the
	// slot's start.
	Interval int64
	// MarginMs is ARGV[2]: how long a tat key lives past its tat, ms.
	MarginMs int64
	// Now is ARGV[3]: µs since the epoch; 0 reads Redis TIME.
	Now int64
	// Slots are ARGV[5..]: the slots' starts, µs since the epoch, in
	// order (ARGV[4] is their number).
	Slots []int64
	// Candidates follow: each candidate's key as an index (0-based) into
	// the KEYS, in the order the candidates may take a slot.
	Candidates []int
}

// KeyCeilingReply is keyceiling.lua's reply.
type KeyCeilingReply struct {
	// Given holds, per slot, the index (0-based) of the candidate given
	// it, or -1 when no candidate's key may take it.
	Given []int
	// TAT holds, per key (in KEYS order), its tat after the call in µs
	// since the epoch; 0 when it has none.
	TAT []int64
}

// KeyCeiling hands slots to candidates under a per-key ceiling: each slot,
// in order, to the first candidate not yet given one whose key's tat is at
// most the slot's start, moving that key's tat to the slot plus
// a.Interval (GCRA without a burst). tats are the candidates' keys' tat
// STRINGs, one per key; every tat written expires a.MarginMs after it.
func (s *Store) KeyCeiling(ctx context.Context, tats []string, a KeyCeilingArgs) (KeyCeilingReply, error) {
	args := make([]any, 0, 4+len(a.Slots)+len(a.Candidates))
	args = append(args, a.Interval, a.MarginMs, a.Now, len(a.Slots))
	for _, t := range a.Slots {
		args = append(args, t)
	}
	for _, c := range a.Candidates {
		if c < 0 || c >= len(tats) {
			return KeyCeilingReply{}, fmt.Errorf("keyceiling: candidate's key %d outside the %d keys", c, len(tats))
		}
		args = append(args, c+1)
	}
	v, err := s.ints(ctx, keyCeiling, tats, len(a.Slots)+len(tats), args...)
	if err != nil {
		return KeyCeilingReply{}, err
	}
	r := KeyCeilingReply{Given: make([]int, len(a.Slots)), TAT: v[len(a.Slots):]}
	for j, g := range v[:len(a.Slots)] {
		if g < 0 || g > int64(len(a.Candidates)) {
			return KeyCeilingReply{}, fmt.Errorf("keyceiling: slot %d given to candidate %d of %d", j, g, len(a.Candidates))
		}
		r.Given[j] = int(g) - 1
	}
	return r, nil
}
