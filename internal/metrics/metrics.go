// Package metrics defines every Prometheus metric shaper exports, registered
// on an explicit registry. Names follow shaper_<subsystem>_<name>_<unit>:
// counters end in _total, durations in _seconds.
package metrics

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics holds shaper's collectors. A nil *Metrics is valid and records
// nothing, so library users need not register anything.
type Metrics struct {
	Releases          *prometheus.CounterVec   // downstream
	SlotWait          *prometheus.HistogramVec // downstream
	Lateness          *prometheus.HistogramVec // downstream
	BucketFull        *prometheus.CounterVec   // downstream
	LateSkips         *prometheus.CounterVec   // downstream
	Recovered         *prometheus.CounterVec   // downstream
	Pushbacks         *prometheus.CounterVec   // downstream
	AdaptiveDecreases *prometheus.CounterVec   // downstream
	Outcomes          *prometheus.CounterVec   // downstream, outcome
	Backlog           *prometheus.GaugeVec     // downstream, state
	RateInForce       *prometheus.GaugeVec     // downstream
	Paused            *prometheus.GaugeVec     // downstream
	Held              *prometheus.GaugeVec     // downstream
	LeasesInUse       *prometheus.GaugeVec     // downstream
	ConcurrencyLimit  *prometheus.GaugeVec     // downstream
	ScriptDuration    *prometheus.HistogramVec // script
	ScriptErrors      *prometheus.CounterVec   // script
	Decisions         *prometheus.CounterVec   // downstream, limiter, outcome
	Deferrals         *prometheus.CounterVec   // downstream
	FailOpen          *prometheus.CounterVec   // downstream, limiter
	Enqueued          *prometheus.CounterVec   // downstream
	CronTicks         *prometheus.CounterVec   // job, outcome
	Quarantined       *prometheus.CounterVec   // downstream, reason
	QuarantineLen     *prometheus.GaugeVec     // downstream
	ShadowDecisions   *prometheus.CounterVec   // downstream, limiter, outcome
	ShadowLimiter     *prometheus.GaugeVec     // downstream, limiter
	ShadowWait        *prometheus.HistogramVec // downstream
	ShadowMode        *prometheus.GaugeVec     // downstream
	DeadlinePassed    *prometheus.CounterVec   // downstream
	LateRejected      *prometheus.CounterVec   // downstream
}

// New registers shaper's metrics on reg, or, for those already registered
// there, reuses the registered collectors: the dispatcher, the producer and
// cron each call it with the prometheus.Registerer they were given, so that
// one registry holds one set. A nil reg gives a nil *Metrics, which
// records nothing.
func New(reg prometheus.Registerer) *Metrics {
	if reg == nil {
		return nil
	}
	f := factory{reg}
	waits := []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2, 5, 10, 30}
	return &Metrics{
		Releases: f.NewCounterVec(prometheus.CounterOpts{Namespace: "shaper", Subsystem: "shaping", Name: "releases_total",
			Help: "Tasks released to their downstream handler."}, []string{"downstream"}),
		SlotWait: f.NewHistogramVec(prometheus.HistogramOpts{Namespace: "shaper", Subsystem: "shaping", Name: "slot_wait_seconds",
			Help: "Wait from reservation to the reserved slot.", Buckets: waits}, []string{"downstream"}),
		Lateness: f.NewHistogramVec(prometheus.HistogramOpts{Namespace: "shaper", Subsystem: "shaping", Name: "lateness_seconds",
			Help: "Release time minus the reserved slot's time.", Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .5, 1}}, []string{"downstream"}),
		BucketFull: f.NewCounterVec(prometheus.CounterOpts{Namespace: "shaper", Subsystem: "shaping", Name: "bucket_full_total",
			Help: "Lane reservation calls that found the bucket full (the lane then sleeps until room opens; waiting workers never call Redis)."}, []string{"downstream"}),
		Recovered: f.NewCounterVec(prometheus.CounterOpts{Namespace: "shaper", Subsystem: "shaping", Name: "recovered_tasks_total",
			Help: "Tasks a dead process held, returned to the front of their queue by another process (no attempt consumed)."}, []string{"downstream"}),
		LateSkips: f.NewCounterVec(prometheus.CounterOpts{Namespace: "shaper", Subsystem: "shaping", Name: "late_skips_total",
			Help: "Slots wasted because the worker woke too far behind them (it queues again rather than bunch releases)."}, []string{"downstream"}),
		Pushbacks: f.NewCounterVec(prometheus.CounterOpts{Namespace: "shaper", Subsystem: "shaping", Name: "pushbacks_total",
			Help: "Times a downstream asked to back off (429/503 Retry-After) and its bucket was pushed forward."}, []string{"downstream"}),
		AdaptiveDecreases: f.NewCounterVec(prometheus.CounterOpts{Namespace: "shaper", Subsystem: "shaping", Name: "adaptive_decreases_total",
			Help: "429/503/timeout answers reported to the adaptive (AIMD) rate."}, []string{"downstream"}),
		Outcomes: f.NewCounterVec(prometheus.CounterOpts{Namespace: "shaper", Subsystem: "shaping", Name: "handler_outcomes_total",
			Help: "Handler results: success, retry, archived, throttled, panic, malformed."}, []string{"downstream", "outcome"}),
		Backlog: f.NewGaugeVec(prometheus.GaugeOpts{Namespace: "shaper", Subsystem: "queue", Name: "tasks",
			Help: "Tasks per downstream queue and state (pending, active, scheduled, retry, archived)."}, []string{"downstream", "state"}),
		RateInForce: f.NewGaugeVec(prometheus.GaugeOpts{Namespace: "shaper", Subsystem: "shaping", Name: "rate_per_second",
			Help: "Release rate in force for the downstream."}, []string{"downstream"}),
		Paused: f.NewGaugeVec(prometheus.GaugeOpts{Namespace: "shaper", Subsystem: "shaping", Name: "paused",
			Help: "1 while the downstream is paused."}, []string{"downstream"}),
		Held: f.NewGaugeVec(prometheus.GaugeOpts{Namespace: "shaper", Subsystem: "shaping", Name: "held_tasks",
			Help: "Tasks this process holds while they wait for their slot."}, []string{"downstream"}),
		LeasesInUse: f.NewGaugeVec(prometheus.GaugeOpts{Namespace: "shaper", Subsystem: "shaping", Name: "leases_in_use",
			Help: "Calls in flight this process holds a concurrency lease for (sum over processes for the downstream's total)."}, []string{"downstream"}),
		ConcurrencyLimit: f.NewGaugeVec(prometheus.GaugeOpts{Namespace: "shaper", Subsystem: "shaping", Name: "concurrency_limit",
			Help: "The downstream's cap on calls in flight across every process (0: none)."}, []string{"downstream"}),
		ScriptDuration: f.NewHistogramVec(prometheus.HistogramOpts{Namespace: "shaper", Subsystem: "redis", Name: "script_duration_seconds",
			Help: "Latency of shaper's Lua script calls.", Buckets: []float64{.0002, .0005, .001, .002, .005, .01, .05, .1, .5, 1}}, []string{"script"}),
		ScriptErrors: f.NewCounterVec(prometheus.CounterOpts{Namespace: "shaper", Subsystem: "redis", Name: "script_errors_total",
			Help: "Lua script calls that failed or timed out."}, []string{"script"}),
		Decisions: f.NewCounterVec(prometheus.CounterOpts{Namespace: "shaper", Subsystem: "admission", Name: "decisions_total",
			Help: "Admission decisions by limiter and outcome (allowed, rejected, deferred, error)."}, []string{"downstream", "limiter", "outcome"}),
		Deferrals: f.NewCounterVec(prometheus.CounterOpts{Namespace: "shaper", Subsystem: "admission", Name: "deferrals_total",
			Help: "Tasks enqueued to run at their Retry-After instead of being rejected."}, []string{"downstream"}),
		FailOpen: f.NewCounterVec(prometheus.CounterOpts{Namespace: "shaper", Subsystem: "admission", Name: "fail_open_total",
			Help: "Requests allowed without a decision because Redis failed and the policy is fail-open."}, []string{"downstream", "limiter"}),
		CronTicks: f.NewCounterVec(prometheus.CounterOpts{Namespace: "shaper", Subsystem: "cron", Name: "ticks_total",
			Help: "Cron ticks by outcome: enqueued, deferred, taken (by another process), rejected, error."}, []string{"job", "outcome"}),
		Enqueued: f.NewCounterVec(prometheus.CounterOpts{Namespace: "shaper", Subsystem: "queue", Name: "enqueued_total",
			Help: "Tasks enqueued."}, []string{"downstream"}),
		Quarantined: f.NewCounterVec(prometheus.CounterOpts{Namespace: "shaper", Subsystem: "queue", Name: "quarantined_total",
			Help: "Corrupt queue entries (no task hash, empty or undecodable msg, id mismatch) this process moved to the quarantine."}, []string{"downstream", "reason"}),
		QuarantineLen: f.NewGaugeVec(prometheus.GaugeOpts{Namespace: "shaper", Subsystem: "queue", Name: "quarantine_entries",
			Help: "Entries in the downstream's quarantine list (shared by every process; bounded, expires)."}, []string{"downstream"}),
		ShadowDecisions: f.NewCounterVec(prometheus.CounterOpts{Namespace: "shaper", Subsystem: "admission", Name: "shadow_decisions_total",
			Help: "Decisions of admission limiters in shadow mode, none applied: allowed, rejected (would have), deferred (would have, under on_reject: defer), error."}, []string{"downstream", "limiter", "outcome"}),
		ShadowLimiter: f.NewGaugeVec(prometheus.GaugeOpts{Namespace: "shaper", Subsystem: "admission", Name: "shadow_mode",
			Help: "1 while the admission limiter runs in shadow mode in this process, 0 while it is enforced."}, []string{"downstream", "limiter"}),
		ShadowWait: f.NewHistogramVec(prometheus.HistogramOpts{Namespace: "shaper", Subsystem: "shaping", Name: "shadow_wait_seconds",
			Help:    "In shadow shaping, the wait each released task would have had (queue and slot) had the rate been enforced.",
			Buckets: []float64{.001, .01, .05, .1, .25, .5, 1, 2, 5, 10, 30, 60, 300, 1800, 3600}}, []string{"downstream"}),
		ShadowMode: f.NewGaugeVec(prometheus.GaugeOpts{Namespace: "shaper", Subsystem: "shaping", Name: "shadow_mode",
			Help: "1 while the downstream's shaping runs in shadow mode in this process (tasks are released at once), 0 while it is enforced."}, []string{"downstream"}),
		DeadlinePassed: f.NewCounterVec(prometheus.CounterOpts{Namespace: "shaper", Subsystem: "shaping", Name: "deadline_passed_total",
			Help: "Tasks archived unsent, with reason \"deadline passed\", because their deadline came before their slot."}, []string{"downstream"}),
		LateRejected: f.NewCounterVec(prometheus.CounterOpts{Namespace: "shaper", Subsystem: "queue", Name: "late_rejections_total",
			Help: "Tasks refused at enqueue (on_late: reject) because their predicted start was past their deadline."}, []string{"downstream"}),
	}
}

// ObserveScript records one script call.
func (m *Metrics) ObserveScript(script string, d time.Duration, err error) {
	if m == nil {
		return
	}
	m.ScriptDuration.WithLabelValues(script).Observe(d.Seconds())
	if err != nil {
		m.ScriptErrors.WithLabelValues(script).Inc()
	}
}

// factory builds collectors on a registry the way promauto.With does,
// except that a collector already registered there is reused.
type factory struct{ reg prometheus.Registerer }

func (f factory) NewCounterVec(o prometheus.CounterOpts, labels []string) *prometheus.CounterVec {
	return register(f.reg, prometheus.NewCounterVec(o, labels))
}

func (f factory) NewGaugeVec(o prometheus.GaugeOpts, labels []string) *prometheus.GaugeVec {
	return register(f.reg, prometheus.NewGaugeVec(o, labels))
}

func (f factory) NewHistogramVec(o prometheus.HistogramOpts, labels []string) *prometheus.HistogramVec {
	return register(f.reg, prometheus.NewHistogramVec(o, labels))
}

// register registers c on reg, or returns the identical collector already
// there. Any other registration error is a programming error: it panics,
// as promauto does.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	panic(err)
}
