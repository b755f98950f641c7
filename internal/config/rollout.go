package config

import (
	"cmp"
	"fmt"

	"github.com/shaper-io/shaper/limiters"
)

// Mode is whether a limit is enforced or only watched, as written in the
// file: an admission limiter's mode, a downstream's shaping_mode. The mode
// in the file is where a process starts; `shaper ctl mode` changes it at
// runtime for every process (the change lives in Redis).
type Mode string

// The modes.
const (
	// ModeEnforce applies the limit (the default).
	ModeEnforce Mode = "enforce"
	// ModeShadow decides and charges as if enforcing, counts what the
	// limit would have done (would reject, would defer, would have
	// waited), and lets every task through untouched.
	ModeShadow Mode = "shadow"
)

// Limiters is m as a limiters.Mode (Enforce unless m is ModeShadow).
func (m Mode) Limiters() limiters.Mode {
	if m == ModeShadow {
		return limiters.Shadow
	}
	return limiters.Enforce
}

// OnLate is what becomes of a task whose deadline (or ttl) it cannot
// meet.
type OnLate string

// The OnLate values.
const (
	// LateArchive enqueues the task whatever its predicted start; if its
	// deadline passes while it waits it is archived unsent, with the reason
	// "deadline passed" (the default).
	LateArchive OnLate = "archive"
	// LateReject also refuses, at enqueue, a task whose predicted start is
	// past its deadline.
	LateReject OnLate = "reject"
)

// fillRollout sets the defaults of the rollout fields.
func (d *Downstream) fillRollout() {
	d.ShapingMode = cmp.Or(d.ShapingMode, ModeEnforce)
	d.OnLate = cmp.Or(d.OnLate, LateArchive)
	if a := d.Admission; a != nil {
		for j := range a.Limiters {
			a.Limiters[j].Mode = cmp.Or(a.Limiters[j].Mode, ModeEnforce)
		}
	}
}

// validateRollout checks the modes and on_late.
func (d *Downstream) validateRollout(p string) *Error {
	if e := checkMode(p+".shaping_mode", d.ShapingMode); e != nil {
		return e
	}
	if d.OnLate != LateArchive && d.OnLate != LateReject {
		return errf(p+".on_late", "invalid value %s (want archive or reject)", q(string(d.OnLate)))
	}
	if a := d.Admission; a != nil {
		for j, l := range a.Limiters {
			if e := checkMode(fmt.Sprintf("%s.admission.limiters[%d].mode", p, j), l.Mode); e != nil {
				return e
			}
		}
	}
	return nil
}

func checkMode(path string, m Mode) *Error {
	if m != ModeEnforce && m != ModeShadow {
		return errf(path, "invalid value %s (want enforce or shadow)", q(string(m)))
	}
	return nil
}
