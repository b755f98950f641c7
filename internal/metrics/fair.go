package metrics

import "github.com/prometheus/client_golang/prometheus"

// FairTopKeys bounds the per-key series of a fair downstream: only the
// keys with the most releases in the last minute get one.
const FairTopKeys = 10

// FairMetrics are the fair-share collectors (shaper_fair_*).
type FairMetrics struct {
	ActiveKeys  *prometheus.GaugeVec // downstream
	Waiting     *prometheus.GaugeVec // downstream
	Jain        *prometheus.GaugeVec // downstream
	KeyReleases *prometheus.GaugeVec // downstream, key (KeyLabel; top FairTopKeys only, label values through SafeKey)
	KeyControls *prometheus.GaugeVec // downstream, control (rate, weight, paused)
}

func newFair(f factory) *FairMetrics {
	g := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return f.gauge("fair", name, help, labels...)
	}
	return &FairMetrics{
		ActiveKeys: g("active_keys", "Admission keys with tasks waiting in fair order (shared by every process).", "downstream"),
		Waiting:    g("waiting_tasks", "Tasks waiting in fair order, or for their key's ceiling or due time (shared by every process).", "downstream"),
		Jain: g("jain_index", "Jain's fairness index of this process's releases over the last minute, per unit of weight, among keys with a backlog (1: equal shares).",
			"downstream"),
		KeyControls: g("key_controls", "Admission keys an operator gave a runtime setting (shaper ctl key), by setting: rate, weight, paused.",
			"downstream", "control"),
		KeyReleases: g("key_releases", "Releases by this process in the last minute for the top keys only (bounded cardinality); on /metrics only under http.metrics_keys.",
			"downstream", KeyLabel),
	}
}
