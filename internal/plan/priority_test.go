package plan_test

import (
	"strings"
	"testing"

	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/plan"
)

// priority.weights are refused by name until the dispatcher serves them
// (shaping.Priority has no weights yet), not dropped for strict priority.
func TestBuildPriorityWeights(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte("downstreams:\n  - {name: api, rate: 20/s, handler: {type: log}, priority: {weights: {1: 8, 3: 2}}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plan.Build(cfg); err == nil || !strings.Contains(err.Error(), "downstreams[0].priority.weights") {
		t.Errorf("Build: %v, want an error naming downstreams[0].priority.weights", err)
	}
	p := build(t, "downstreams:\n  - {name: api, rate: 20/s, handler: {type: log}, priority: {default: 2}}\n")
	if pr := p.Downstreams[0].Shaping.Priority; pr == nil || pr.Default != 2 {
		t.Errorf("strict priority: got %+v, want default 2", pr)
	}
}
