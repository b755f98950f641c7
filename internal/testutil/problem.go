package testutil

import (
	"strings"
	"testing"

	"github.com/shaper-io/shaper/internal/field"
)

// WantProblem checks a rule's answer in a table test: nil when fieldName
// is "", else a problem naming fieldName and goField, its message
// containing msg, and its Error the Go path first.
func WantProblem(t *testing.T, name string, p *field.Problem, fieldName, goField, msg string) {
	t.Helper()
	switch {
	case fieldName == "":
		if p != nil {
			t.Errorf("%s: %v, want nil", name, p)
		}
	case p == nil || p.Field != fieldName || p.GoField != goField || !strings.Contains(p.Msg, msg):
		t.Errorf("%s: %+v, want %s / %s containing %q", name, p, fieldName, goField, msg)
	case !strings.HasPrefix(p.Error(), goField+": "):
		t.Errorf("%s: Error() %q, want the Go path first", name, p.Error())
	}
}
