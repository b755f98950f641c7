package limiters

import (
	"fmt"
	"sync/atomic"
)

// Mode says whether a limit is enforced or only observed. A limit in
// Shadow is decided and charged exactly as if it were enforced (so its
// counts are the ones it would produce), but its rejections are not
// applied: the request passes. It is how a new or tighter limit is rolled
// out: watch what it would do, then enforce it.
type Mode int32

const (
	// Enforce applies the limit's decisions (the zero value).
	Enforce Mode = iota
	// Shadow decides and charges but lets every request through.
	Shadow
)

// String is the mode's config name: "enforce" or "shadow".
func (m Mode) String() string {
	if m == Shadow {
		return "shadow"
	}
	return "enforce"
}

// ParseMode accepts "enforce" or "shadow".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "enforce":
		return Enforce, nil
	case "shadow":
		return Shadow, nil
	}
	return Enforce, fmt.Errorf("%w: unknown mode %q (want enforce or shadow)", ErrInvalidLimit, s)
}

// ModeVar is a Mode that can change while requests are decided (an
// operator switching a limit at runtime). Safe for concurrent use; a nil
// *ModeVar reads as Enforce.
type ModeVar struct{ v atomic.Int32 }

// NewModeVar returns a ModeVar holding m.
func NewModeVar(m Mode) *ModeVar {
	v := &ModeVar{}
	v.Store(m)
	return v
}

// Load is the mode now; Enforce for a nil v.
func (v *ModeVar) Load() Mode {
	if v == nil {
		return Enforce
	}
	return Mode(v.v.Load())
}

// Store sets the mode.
func (v *ModeVar) Store(m Mode) { v.v.Store(int32(m)) }

// ShadowDecision is the decision of a Layered layer in Shadow mode: made,
// and when allowed charged, as if enforced, but not applied.
type ShadowDecision struct {
	// Result is the layer's decision: Allowed false is a rejection that
	// enforcing the layer would have made.
	Result
	// Err is the layer's error when it could not decide (Redis failed and
	// its policy is fail_closed); nil otherwise.
	Err error
}

// Outcome names the decision for metrics: "allowed", "rejected" or
// "error".
func (d ShadowDecision) Outcome() string {
	switch {
	case d.Err != nil:
		return "error"
	case d.Allowed:
		return "allowed"
	}
	return "rejected"
}
