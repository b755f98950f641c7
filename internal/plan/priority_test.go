package plan_test

import (
	"testing"

	"github.com/shaper-io/shaper/internal/priority"
)

// priority.weights reach the dispatcher as priority.Weights, a level the
// file leaves out at weight 1; without weights the priority is strict.
func TestBuildPriorityWeights(t *testing.T) {
	t.Parallel()
	p := build(t, "downstreams:\n  - {name: api, rate: 20/s, handler: {type: log}, priority: {default: 4, weights: {1: 8, 3: 2}}}\n"+
		"  - {name: b, rate: 1/s, handler: {type: log}, priority: {}}\n")
	pr := p.Downstreams[0].Shaping.Priority
	if want := (priority.Weights{8, 1, 2, 1, 1}); pr == nil || pr.Weights != want || pr.Default != 4 {
		t.Errorf("api: priority %+v, want default 4, weights %v", pr, want)
	}
	if pr := p.Downstreams[1].Shaping.Priority; pr == nil || !pr.Weights.Strict() {
		t.Errorf("b: priority %+v, want strict", pr)
	}
}
