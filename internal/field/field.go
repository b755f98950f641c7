// Package field names a setting out of range in the config file's words
// and in Go's at once, so that one rule serves both: the package that owns
// a rule (internal/quota, internal/breakerspec, internal/fairindex,
// internal/sizing) returns a Problem; internal/config reports Field under
// the downstream's YAML path, package shaping reports GoField.
package field

import "fmt"

// Problem is a setting out of range: Field as the config file names it
// ("quotas[1].per"), GoField as Go does ("Quotas[1].Per"), and Msg, what
// is wrong, with the values.
type Problem struct {
	Field, GoField, Msg string
}

// Error is the Go view: "Quotas[1].Per: must be ...".
func (p *Problem) Error() string { return p.GoField + ": " + p.Msg }

// Errorf is a Problem of the setting named field and goField.
func Errorf(field, goField, format string, args ...any) *Problem {
	return &Problem{Field: field, GoField: goField, Msg: fmt.Sprintf(format, args...)}
}

// Under is p with both names under a parent setting (field "breaker",
// goField "Breaker": "breaker.probe_rate", "Breaker.ProbeRate"); nil when
// p is nil. An empty name leaves that side as it is.
func (p *Problem) Under(field, goField string) *Problem {
	if p == nil {
		return nil
	}
	q := *p
	q.Field = join(field, p.Field)
	q.GoField = join(goField, p.GoField)
	return &q
}

func join(parent, child string) string {
	switch {
	case parent == "":
		return child
	case child == "":
		return parent
	case child[0] == '[':
		return parent + child
	}
	return parent + "." + child
}
