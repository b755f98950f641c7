package config

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/shaper-io/shaper/internal/rlheader"
)

// RateHeaders reads the limits a downstream announces in header fields of
// its own, beside the standard ones (RateLimit, X-RateLimit-*,
// Retry-After): a vendor's profile by name (`rate_headers: shopify`), or
// a mapping of its fields.
type RateHeaders struct {
	// Profile is a built-in vendor profile (rlheader.Profiles); exclusive
	// with the fields below.
	Profile string `yaml:"profile,omitempty"`
	// Remaining and Limit name the fields with the units left and the
	// window's quota; UsedOf instead names one holding "used/max"
	// (UsedKey: the key of its key=used/max members).
	Remaining string `yaml:"remaining,omitempty"`
	Limit     string `yaml:"limit,omitempty"`
	UsedOf    string `yaml:"used_of,omitempty"`
	UsedKey   string `yaml:"used_key,omitempty"`
	// Reset names the field with the window's reset, in ResetUnit: s, ms,
	// epoch_s, epoch_ms or iso8601 ("" tells them apart by size).
	Reset     string `yaml:"reset,omitempty"`
	ResetUnit string `yaml:"reset_unit,omitempty"`
	// Window is the window's length when no reset is sent.
	Window Duration `yaml:"window,omitempty"`
	// Refused names a field whose presence means the call was refused;
	// Hold is how long that holds when nothing says (default 1s).
	Refused string   `yaml:"refused,omitempty"`
	Hold    Duration `yaml:"hold,omitempty"`
}

// UnmarshalYAML reads a profile name or a mapping of fields; an unknown
// field is refused (a mapping's own decoder would drop it).
func (r *RateHeaders) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*r = RateHeaders{Profile: n.Value}
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return nodeError(n, "rate_headers must be a profile name (%s) or a mapping of header fields", strings.Join(rlheader.Profiles(), ", "))
	}
	known := yamlFields(reflect.TypeFor[RateHeaders]())
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i].Value; !slices.Contains(known, k) {
			return nodeError(n.Content[i], "rate_headers has no field %s (fields: %s)", q(k), strings.Join(known, ", "))
		}
	}
	type plain RateHeaders
	return n.Decode((*plain)(r))
}

// Mapping is r as the answer reader takes it.
func (r RateHeaders) Mapping() (rlheader.Mapping, error) {
	if r.Profile != "" {
		if r != (RateHeaders{Profile: r.Profile}) {
			return rlheader.Mapping{}, fmt.Errorf("a profile (%s) takes no other field", q(r.Profile))
		}
		m, ok := rlheader.Profile(r.Profile)
		if !ok {
			return rlheader.Mapping{}, fmt.Errorf("unknown profile %s (profiles: %s)", q(r.Profile), strings.Join(rlheader.Profiles(), ", "))
		}
		return m, nil
	}
	m := rlheader.Mapping{Name: "rate_headers", Remaining: r.Remaining, Limit: r.Limit, UsedOf: r.UsedOf, UsedKey: r.UsedKey,
		Reset: r.Reset, ResetUnit: r.ResetUnit, Window: time.Duration(r.Window), Refused: r.Refused, Hold: time.Duration(r.Hold)}
	if err := m.Validate(); err != nil {
		var fe *rlheader.FieldError
		if errors.As(err, &fe) {
			return m, fmt.Errorf("%s %s: %s", yamlName(fe.Field), q(fe.Value), fe.Reason)
		}
		return m, err
	}
	return m, nil
}

// yamlName is the file's name of a Mapping field ("ResetUnit": reset_unit).
func yamlName(goField string) string {
	var b strings.Builder
	for i, c := range goField {
		if c >= 'A' && c <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			c += 'a' - 'A'
		}
		b.WriteRune(c)
	}
	return b.String()
}
