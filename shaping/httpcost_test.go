package shaping_test

import (
	"net/http"
	"testing"

	"github.com/shaper-io/shaper/shaping"
)

// The http handler reads an answer's cost from CostHeader, else from the
// CostJSON path in the body; anything but a number of units, 0 or more,
// is no cost.
func TestAnswerCost(t *testing.T) {
	t.Parallel()
	hdr := http.Header{"X-Request-Cost": {"7"}}
	for i, c := range []struct {
		h      http.Header
		body   string
		header string
		path   string
		want   int64
		ok     bool
	}{
		{hdr, `{"data":{"cost":3}}`, "X-Request-Cost", "data.cost", 7, true},
		{nil, `{"data":{"cost":3}}`, "X-Request-Cost", "data.cost", 3, true},
		{nil, `{"items":[{"cost":1},{"cost":2.5}]}`, "", "items.1.cost", 3, true},
		{http.Header{"X-Request-Cost": {"-1"}}, `{}`, "X-Request-Cost", "", 0, false},
		{nil, `{"data":{"cost":"3"}}`, "", "data.cost", 0, false},
		{nil, `{"data":[1]}`, "", "data.5", 0, false},
		{nil, `not json`, "", "data.cost", 0, false},
		{nil, `{"cost":1e300}`, "", "cost", 0, false},
		{hdr, `{}`, "", "", 0, false},
	} {
		got, ok := shaping.AnswerCost(c.h, []byte(c.body), shaping.HTTPConfig{CostHeader: c.header, CostJSON: c.path})
		if got != c.want || ok != c.ok {
			t.Errorf("step %d: cost %d, %v; want %d, %v", i, got, ok, c.want, c.ok)
		}
	}
}
