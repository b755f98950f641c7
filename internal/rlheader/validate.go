package rlheader

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrMapping is what every FieldError is (errors.Is).
var ErrMapping = errors.New("rlheader: invalid mapping")

// FieldError is a Mapping field Validate refuses.
type FieldError struct {
	// Field is the field's path: "ResetUnit", "Also[1].Reset".
	Field string
	// Value is what the field holds, as text.
	Value string
	// Reason says what is wrong with it.
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("rlheader: Mapping.%s %q %s", e.Field, e.Value, e.Reason)
}

// Unwrap is ErrMapping.
func (e *FieldError) Unwrap() error { return ErrMapping }

// Validate reports every field of m that is wrong, each a *FieldError
// (joined), or nil.
func (m Mapping) Validate() error {
	var errs []error
	m.validate("", &errs)
	for i, a := range m.Also {
		p := fmt.Sprintf("Also[%d].", i)
		if len(a.Also) > 0 {
			errs = append(errs, &FieldError{p + "Also", fmt.Sprintf("%d mappings", len(a.Also)), "is nested: an Also entry has no Also"})
		}
		a.validate(p, &errs)
	}
	if m.reads() == "" && len(m.Also) == 0 {
		errs = append(errs, &FieldError{"Remaining", "", "is empty: set Remaining, UsedOf, Field, Refused or Also"})
	}
	return errors.Join(errs...)
}

// reads is the first of the fields that make m read a limit of its own;
// "" when none is set.
func (m Mapping) reads() string {
	return cmp.Or(m.Remaining, m.UsedOf, m.Field, m.Refused)
}

// validate adds m's own wrong fields (not its Also's), their paths under
// path, to errs.
func (m Mapping) validate(path string, errs *[]error) {
	bad := func(field, value, reason string) {
		*errs = append(*errs, &FieldError{path + field, value, reason})
	}
	for _, f := range [...]struct{ name, v string }{{"Remaining", m.Remaining}, {"Limit", m.Limit},
		{"UsedOf", m.UsedOf}, {"Reset", m.Reset}, {"WindowHeader", m.WindowHeader}, {"Field", m.Field},
		{"PolicyField", m.PolicyField}, {"Refused", m.Refused}} {
		if f.v != "" && !headerName(f.v) {
			bad(f.name, f.v, "is not a header name")
		}
	}
	for _, d := range [...]struct {
		name string
		v    time.Duration
	}{{"Window", m.Window}, {"Drain", m.Drain}, {"Hold", m.Hold}} {
		if d.v < 0 {
			bad(d.name, d.v.String(), "is negative")
		}
	}
	window := m.Remaining != "" || m.UsedOf != ""
	switch {
	case path != "" && m.reads() == "":
		bad("Remaining", "", "is empty: set Remaining, UsedOf, Field or Refused")
	case m.Remaining != "" && m.UsedOf != "":
		bad("UsedOf", m.UsedOf, "is set with Remaining: the one holds what the other does")
	case window && m.Reset == "" && m.WindowHeader == "" && m.Window <= 0 && m.Drain <= 0:
		bad("Reset", "", "is empty and nothing else says when the window resets: set Reset, WindowHeader, Window or Drain")
	}
	if _, ok := resetForms[m.ResetUnit]; !ok {
		bad("ResetUnit", m.ResetUnit, `is not one of "", "s", "ms", "epoch_s", "epoch_ms", "iso8601"`)
	}
	m.needs(bad)
}

// needs adds, through bad, the fields set without the field they need.
func (m Mapping) needs(bad func(field, value, reason string)) {
	window := m.Remaining != "" || m.UsedOf != ""
	for _, n := range [...]struct {
		set        bool
		field, v   string
		has        bool
		needsField string
	}{
		{m.Limit != "", "Limit", m.Limit, m.Remaining != "", "Remaining"},
		{m.UsedKey != "", "UsedKey", m.UsedKey, m.UsedOf != "", "UsedOf"},
		{m.Reset != "", "Reset", m.Reset, window || m.Refused != "", "Remaining, UsedOf or Refused"},
		{m.ResetUnit != "", "ResetUnit", m.ResetUnit, m.Reset != "", "Reset"},
		{m.WindowUnit != "", "WindowUnit", m.WindowUnit, m.WindowHeader != "", "WindowHeader"},
		{m.WindowHeader != "", "WindowHeader", m.WindowHeader, window, "Remaining or UsedOf"},
		{m.Window != 0, "Window", m.Window.String(), window, "Remaining or UsedOf"},
		{m.Aligned, "Aligned", "true", m.Window > 0 || m.WindowHeader != "", "Window or WindowHeader"},
		{m.Drain != 0, "Drain", m.Drain.String(), m.UsedOf != "" || m.Limit != "", "UsedOf or Limit (the bucket's size)"},
		{m.PolicyField != "", "PolicyField", m.PolicyField, m.Field != "", "Field"},
		{m.Hold != 0, "Hold", m.Hold.String(), m.Refused != "", "Refused"},
	} {
		if n.set && !n.has {
			bad(n.field, n.v, "is set without "+n.needsField)
		}
	}
	if m.WindowUnit != "" && m.WindowUnit != "s" && m.WindowUnit != "ms" {
		bad("WindowUnit", m.WindowUnit, `is not one of "", "s", "ms"`)
	}
}

// headerName reports whether v is a field name (an RFC 9110 token).
func headerName(v string) bool {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return v != ""
}
