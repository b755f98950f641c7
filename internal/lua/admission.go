package lua

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Admission names one admission script.
type Admission int

// The admission scripts (see each .lua file's header).
const (
	// FixedWindow: KEYS[1] the base of a STRING counter per window.
	FixedWindow Admission = iota
	// SlidingLog: KEYS[1] a ZSET of admitted units scored by time.
	SlidingLog
	// SlidingCounter: KEYS[1] the base of two STRING counters (N, N-1).
	SlidingCounter
	// SlidingSubwindows: KEYS[1] a HASH, a field per sub-window number.
	SlidingSubwindows
	// TokenBucket: KEYS[1] a HASH {t, ts}, fixed-point amounts.
	TokenBucket
	// LeakyBucket: KEYS[1] a HASH {l, ts}, policing mode, fixed-point.
	LeakyBucket
)

// admissionScripts describes each Admission: its name, its script and how
// many fields its reply has.
var admissionScripts = [...]struct {
	name   string
	sc     *redis.Script
	fields int
}{
	FixedWindow:       {"fixed_window", fixedWindow, 6}, // plus the counter's PTTL
	SlidingLog:        {"sliding_log", slidingLog, 5},
	SlidingCounter:    {"sliding_counter", slidingCounter, 5},
	SlidingSubwindows: {"sliding_subwindows", slidingSubwindows, 5},
	TokenBucket:       {"token_bucket", tokenBucket, 5},
	LeakyBucket:       {"leaky_bucket", leakyBucket, 5},
}

func (a Admission) String() string {
	if a >= 0 && int(a) < len(admissionScripts) {
		return admissionScripts[a].name
	}
	return fmt.Sprintf("Admission(%d)", int(a))
}

// Hash is the script's SHA1, the name EVALSHA and SCRIPT EXISTS use.
func (a Admission) Hash() string {
	sc, _ := a.script()
	if sc == nil {
		return ""
	}
	return sc.Hash()
}

func (a Admission) script() (sc *redis.Script, fields int) {
	if a < 0 || int(a) >= len(admissionScripts) {
		return nil, 0
	}
	return admissionScripts[a].sc, admissionScripts[a].fields
}

// AdmissionArgs are an admission script's arguments, in its own units.
type AdmissionArgs struct {
	// Limit is ARGV[1]: the units admitted per window (window scripts) or
	// the capacity in scaled units (buckets: burst × scale).
	Limit int64
	// Window is ARGV[2]: the window in µs (window scripts) or the refill
	// or leak rate in scaled units per µs (buckets).
	Window int64
	// Cost is ARGV[3]: the cost in the same units as Limit; 0 only checks.
	Cost int64
	// Now is ARGV[5]: the time in µs since the epoch; 0 reads Redis TIME
	// (an explicit time is for tests and simulations).
	Now int64
	// SubWindows is ARGV[7], SlidingSubwindows only: sub-windows per
	// window.
	SubWindows int64
}

// AdmissionReply is an admission script's reply.
type AdmissionReply struct {
	// Allowed is reply[1] == 1.
	Allowed bool
	// Remaining is reply[2]: the units left (scaled, for the token bucket);
	// the leaky bucket reports its level instead.
	Remaining int64
	// RetryAfter and ResetAfter are reply[3] and reply[4], in µs.
	RetryAfter, ResetAfter int64
	// Token is reply[5]: what identifies the charge for a refund (the
	// window or sub-window number, the admission time; 0 for buckets).
	Token int64
	// CounterPTTL is reply[6], FixedWindow only: the counter's PTTL in ms
	// after the call (-2: no counter); 0 for the other scripts.
	CounterPTTL int64
}

// Admit decides on a.Cost at a.Now and, when allowed, charges it (mode 0).
func (s *Store) Admit(ctx context.Context, alg Admission, key string, a AdmissionArgs) (AdmissionReply, error) {
	return s.admission(ctx, alg, key, a, modeCharge, 0)
}

// PeekAdmission decides without writing anything (mode 1).
func (s *Store) PeekAdmission(ctx context.Context, alg Admission, key string, a AdmissionArgs) (AdmissionReply, error) {
	return s.admission(ctx, alg, key, a, modePeek, 0)
}

// RefundAdmission gives back a charge of a.Cost that Admit made and
// replied token for (mode 2, ARGV[6] token).
func (s *Store) RefundAdmission(ctx context.Context, alg Admission, key string, a AdmissionArgs, token int64) (AdmissionReply, error) {
	return s.admission(ctx, alg, key, a, modeRefund, token)
}

func (s *Store) admission(ctx context.Context, alg Admission, key string, a AdmissionArgs, mode int, token int64) (AdmissionReply, error) {
	sc, fields := alg.script()
	if sc == nil {
		return AdmissionReply{}, fmt.Errorf("unknown admission script %v", alg)
	}
	args := []any{a.Limit, a.Window, a.Cost, mode, a.Now, token}
	if alg == SlidingSubwindows {
		args = append(args, a.SubWindows)
	}
	v, err := s.ints(ctx, sc, []string{key}, fields, args...)
	if err != nil {
		return AdmissionReply{}, err
	}
	r := AdmissionReply{Allowed: v[0] == 1, Remaining: v[1], RetryAfter: v[2], ResetAfter: v[3], Token: v[4]}
	if fields > 5 {
		r.CounterPTTL = v[5]
	}
	return r, nil
}
