package lua

import (
	"context"
	"fmt"
	"strconv"
)

var keyCeiling = script("keyceiling.lua")

// KeyCeilingArgs are keyceiling.lua's arguments. Its KEYS are the tat
// STRINGs (keys.Space.KeyCeiling) of the keys settled and of the
// candidates' keys, each once.
type KeyCeilingArgs struct {
	// Interval is ARGV[1]: µs a slot moves its key's tat past its start.
	Interval int64
	// Hold is ARGV[2]: the furthest after the call's now (µs) that a slot
	// for a key it claims may start.
	Hold int64
	// MarginMs is ARGV[3]: how long a tat key lives past its tat, ms.
	MarginMs int64
	// Now is ARGV[4]: µs since the epoch; 0 reads Redis TIME.
	Now int64
	// Want is ARGV[5]: claim at most this many candidates.
	Want int
	// Settle are the claims of earlier calls to settle first.
	Settle []KeySettle
	// Candidates follow: each candidate's key as an index (0-based) into
	// the KEYS, in the order they may claim; a key is claimed at most once
	// a call.
	Candidates []int
}

// KeySettle settles one claim: when key Key (an index into the KEYS)
// still holds the claim Claim (KeyCeilingReply.Claim), its tat becomes
// TAT (µs; 0 deletes it: the claim got no slot).
type KeySettle struct {
	Key   int
	Claim string
	TAT   int64
}

// KeyCeilingReply is keyceiling.lua's reply.
type KeyCeilingReply struct {
	// Now is the script's time, µs since the epoch.
	Now int64
	// Claimed says, per candidate, whether it claimed its key.
	Claimed []bool
	// TAT holds, per key (in KEYS order), its tat after the call in µs
	// since the epoch, the least it can be for a key claimed and not
	// settled; 0 when it has none.
	TAT []int64
	// Claim is the value this call's claims hold until settled.
	Claim string
}

// KeyCeiling settles earlier claims and claims keys under a per-key
// ceiling (GCRA without a burst, keyceiling.lua): each candidate in order,
// up to a.Want, claims its key when the key's tat has come and no claim
// holds it. A claimed key may not be claimed again before now + a.Hold +
// a.Interval unless settled, so the caller must reserve its slot to start
// within a.Hold of the reply's Now (measured from before the call), then
// settle the claim at that slot's start plus a.Interval, or at 0 when it
// reserved none.
func (s *Store) KeyCeiling(ctx context.Context, tats []string, a KeyCeilingArgs) (KeyCeilingReply, error) {
	args := make([]any, 0, 6+3*len(a.Settle)+len(a.Candidates))
	args = append(args, a.Interval, a.Hold, a.MarginMs, a.Now, a.Want, len(a.Settle))
	for _, st := range a.Settle {
		if st.Key < 0 || st.Key >= len(tats) {
			return KeyCeilingReply{}, fmt.Errorf("keyceiling: settled key %d outside the %d keys", st.Key, len(tats))
		}
		v := ""
		if st.TAT > 0 {
			v = strconv.FormatInt(st.TAT, 10)
		}
		args = append(args, st.Key+1, st.Claim, v)
	}
	for _, c := range a.Candidates {
		if c < 0 || c >= len(tats) {
			return KeyCeilingReply{}, fmt.Errorf("keyceiling: candidate's key %d outside the %d keys", c, len(tats))
		}
		args = append(args, c+1)
	}
	v, err := s.ints(ctx, keyCeiling, tats, 1+len(a.Candidates)+len(tats), args...)
	if err != nil {
		return KeyCeilingReply{}, err
	}
	r := KeyCeilingReply{Now: v[0], Claimed: make([]bool, len(a.Candidates)), TAT: v[1+len(a.Candidates):],
		Claim: strconv.FormatInt(v[0]+a.Interval, 10) + ":" + strconv.FormatInt(v[0]+a.Hold+a.Interval, 10)}
	for i, c := range v[1 : 1+len(a.Candidates)] {
		r.Claimed[i] = c == 1
	}
	return r, nil
}
