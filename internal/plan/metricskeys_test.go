package plan_test

import "testing"

// http.metrics_keys reaches the plan while the HTTP server is on.
func TestMetricsKeys(t *testing.T) {
	t.Parallel()
	const ds = "downstreams:\n  - {name: api, rate: 1/s, handler: {type: log}}\n"
	for i, c := range []struct {
		http string
		want bool
	}{
		{"", false},
		{"http: {metrics_keys: true}\n", true},
		{"http: {metrics_keys: false}\n", false},
		{"http: {listen: off, metrics_keys: true}\n", false},
	} {
		if got := build(t, c.http+ds).MetricsKeys; got != c.want {
			t.Errorf("step %d: %q: MetricsKeys %v, want %v", i, c.http, got, c.want)
		}
	}
}
