package metrics

import "github.com/prometheus/client_golang/prometheus"

// LimitMetrics are the collectors of quotas, announced limits and settled
// costs (shaping/quota.go, shaping/answer.go).
type LimitMetrics struct {
	QuotaUsed      *prometheus.GaugeVec   // downstream, quota
	QuotaLimit     *prometheus.GaugeVec   // downstream, quota
	QuotaReset     *prometheus.GaugeVec   // downstream, quota
	Holds          *prometheus.CounterVec // downstream, by
	AnnouncedPace  *prometheus.GaugeVec   // downstream
	AnnouncedLeft  *prometheus.GaugeVec   // downstream
	AnnouncedReset *prometheus.GaugeVec   // downstream
	Announcements  *prometheus.CounterVec // downstream, source, effect
	SettledCost    *prometheus.CounterVec // downstream, direction
	Clamped        *prometheus.CounterVec // downstream, what
}

func newLimits(f factory) *LimitMetrics {
	return &LimitMetrics{
		QuotaUsed: f.gauge("shaping", "quota_used_units",
			"Units that count against the quota, as this process's last reservation saw them (shared by every process).", "downstream", "quota"),
		QuotaLimit: f.gauge("shaping", "quota_limit_units", "The quota's limit: units per window.", "downstream", "quota"),
		QuotaReset: f.gauge("shaping", "quota_reset_timestamp_seconds",
			"When the quota's use next falls (Unix time): an aligned window's end, or when the oldest counted units stop counting; 0 when nothing counts.",
			"downstream", "quota"),
		Holds: f.counter("shaping", "holds_total",
			"Reservation calls whose first slot a quota or the downstream's announced limit delayed or kept past max_wait, by what held it.", "downstream", "by"),
		AnnouncedPace: f.gauge("shaping", "announced_pace_per_second",
			"The pace the downstream's announced limit imposed on this process's last reservation, in units per second (0: none, the rate applies).", "downstream"),
		AnnouncedLeft: f.gauge("shaping", "announced_left_units",
			"Units the announced limit in force leaves, after this process's last answer that carried one (-1: none in force).", "downstream"),
		AnnouncedReset: f.gauge("shaping", "announced_reset_timestamp_seconds",
			"When the window of the last limit this process's answers announced resets (Unix time).", "downstream"),
		Announcements: f.counter("shaping", "announcements_total",
			"Answers whose headers announced a limit that binds, by source (ratelimit, x-ratelimit, retry-after) and effect (hold: nothing left until the reset; pace: less left than the rate would spend; stale: a later answer's is in force).",
			"downstream", "source", "effect"),
		Clamped: f.counter("shaping", "answer_clamped_total",
			"Answers whose hold or cost was cut or refused, by what: hold (an announced reset or Retry-After past max_hold), cost_high (a reported cost above its cap), cost_low (a reported cost below 1, refused as at enqueue).",
			"downstream", "what"),
		SettledCost: f.counter("shaping", "settled_cost_units_total",
			"Cost units settled after the call: charged (the answer cost more than reserved) or refunded (less).", "downstream", "direction"),
	}
}
