package config

import (
	"strings"
	"testing"

	"github.com/shaper-io/shaper/limiters"
)

func TestRolloutFields(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `
downstreams:
  - name: api
    rate: 5/s
    shaping_mode: shadow
    on_late: reject
    handler: {type: log}
    admission:
      limiters:
        - {rate: 10/s, mode: shadow}
        - {rate: 100/m}
`)
	d := c.Downstreams[0]
	if d.ShapingMode != ModeShadow || d.OnLate != LateReject {
		t.Errorf("shaping_mode, on_late = %q, %q; want shadow, reject", d.ShapingMode, d.OnLate)
	}
	if g := d.Admission.Limiters; g[0].Mode.Limiters() != limiters.Shadow || g[1].Mode != ModeEnforce {
		t.Errorf("limiter modes = %q, %q; want shadow, enforce (the default)", g[0].Mode, g[1].Mode)
	}
	for _, tt := range []struct{ doc, want string }{
		{"downstreams:\n  - name: a\n    rate: 1/s\n    shaping_mode: dry\n    handler: {type: log}\n",
			`downstreams[0].shaping_mode: invalid value "dry" (want enforce or shadow)`},
		{"downstreams:\n  - name: a\n    rate: 1/s\n    on_late: drop\n    handler: {type: log}\n",
			`downstreams[0].on_late: invalid value "drop" (want archive or reject)`},
		{"downstreams:\n  - name: a\n    rate: 1/s\n    handler: {type: log}\n    admission: {limiters: [{rate: 1/s, mode: off}]}\n",
			`downstreams[0].admission.limiters[0].mode: invalid value "off" (want enforce or shadow)`},
	} {
		if _, err := Parse([]byte(tt.doc)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v\nwant an error containing %s", tt.doc, err, tt.want)
		}
	}
}
