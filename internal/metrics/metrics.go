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
	Releases, BucketFull, LateSkips, Recovered, FinishRetries, Pushbacks, AdaptiveDecreases, Deferrals, Enqueued *prometheus.CounterVec   // downstream
	RateInForce, Paused, Held, LeasesInUse, ConcurrencyLimit, QuarantineLen                                      *prometheus.GaugeVec     // downstream
	SlotWait, Lateness                                                                                           *prometheus.HistogramVec // downstream

	Outcomes       *prometheus.CounterVec   // downstream, outcome
	Cancelled      *prometheus.CounterVec   // downstream, when
	Collapsed      *prometheus.CounterVec   // downstream, mode
	BreakerState   *prometheus.GaugeVec     // downstream
	BreakerMoves   *prometheus.CounterVec   // downstream, to
	Backlog        *prometheus.GaugeVec     // downstream, state
	Quarantined    *prometheus.CounterVec   // downstream, reason
	Decisions      *prometheus.CounterVec   // downstream, limiter, outcome
	FailOpen       *prometheus.CounterVec   // downstream, limiter
	CronTicks      *prometheus.CounterVec   // job, outcome
	ScriptDuration *prometheus.HistogramVec // script
	ScriptErrors   *prometheus.CounterVec   // script
	Fair           *FairMetrics             // fair-share downstreams
	Limits         *LimitMetrics            // quotas, announced limits, settled costs

	ShadowDecisions *prometheus.CounterVec   // downstream, limiter, outcome
	ShadowLimiter   *prometheus.GaugeVec     // downstream, limiter
	ShadowWait      *prometheus.HistogramVec // downstream
	ShadowMode      *prometheus.GaugeVec     // downstream
	DeadlinePassed  *prometheus.CounterVec   // downstream
	LateRejected    *prometheus.CounterVec   // downstream

	FleetProtocols *prometheus.GaugeVec // no labels
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
		Fair:     newFair(f),
		Limits:   newLimits(f),
		Releases: f.counter("shaping", "releases_total", "Tasks released to their downstream handler.", "downstream"),
		SlotWait: f.histogram("shaping", "slot_wait_seconds", "Wait from reservation to the reserved slot.", waits, "downstream"),
		Lateness: f.histogram("shaping", "lateness_seconds", "Release time minus the reserved slot's time.",
			[]float64{.0005, .001, .002, .005, .01, .025, .05, .1, .5, 1}, "downstream"),
		BucketFull:        f.counter("shaping", "bucket_full_total", "Lane reservation calls that found the bucket full (the lane then sleeps until room opens; waiting workers never call Redis).", "downstream"),
		Recovered:         f.counter("shaping", "recovered_tasks_total", "Tasks a dead process held, returned to the front of their queue by another process (no attempt consumed).", "downstream"),
		FinishRetries:     f.counter("shaping", "finish_retries_total", "Tries again of asynq's write that finishes a task (done, archived) after it failed on the network; without them the task would be delivered twice.", "downstream"),
		LateSkips:         f.counter("shaping", "late_skips_total", "Slots wasted because the worker woke too far behind them (it queues again rather than bunch releases).", "downstream"),
		Pushbacks:         f.counter("shaping", "pushbacks_total", "Times a downstream asked to back off (429/503 Retry-After) and its bucket was pushed forward.", "downstream"),
		AdaptiveDecreases: f.counter("shaping", "adaptive_decreases_total", "429/503/timeout answers reported to the adaptive (AIMD) rate.", "downstream"),
		Outcomes:          f.counter("shaping", "handler_outcomes_total", "Handler results: success, retry, archived, throttled, outage (held by the circuit breaker), panic, malformed, deadline_passed, cancelled, key_paused (held unsent for its paused key).", "downstream", "outcome"),
		Cancelled:         f.counter("shaping", "cancelled_tasks_total", "Tasks cancelled after they were taken (asynq's CancelProcessing, DELETE on an active task): when is before_call (removed unsent) or during_call (the call's context was cancelled).", "downstream", "when"),
		Collapsed:         f.counter("queue", "collapsed_tasks_total", "Tasks collapsed into a waiting task with the same collapse key (mode keep_last: its payload replaced; keep_first: the newcomer dropped); no call of their own.", "downstream", "mode"),
		Backlog:           f.gauge("queue", "tasks", "Tasks per downstream queue and state (pending, active, scheduled, retry, archived).", "downstream", "state"),
		RateInForce:       f.gauge("shaping", "rate_per_second", "Release rate in force for the downstream.", "downstream"),
		Paused:            f.gauge("shaping", "paused", "1 while the downstream is paused.", "downstream"),
		Held:              f.gauge("shaping", "held_tasks", "Tasks this process holds while they wait for their slot.", "downstream"),
		LeasesInUse:       f.gauge("shaping", "leases_in_use", "Calls in flight this process holds a concurrency lease for (sum over processes for the downstream's total).", "downstream"),
		ConcurrencyLimit:  f.gauge("shaping", "concurrency_limit", "The downstream's cap on calls in flight across every process (0: none).", "downstream"),
		BreakerState:      f.gauge("shaping", "breaker_state", "The downstream's circuit breaker as this process last saw it: 0 closed, 1 open, 2 half-open.", "downstream"),
		BreakerMoves:      f.counter("shaping", "breaker_transitions_total", "Circuit breaker transitions this process made (to: open, half_open, closed); each is made by one process, so sum over processes.", "downstream", "to"),
		ScriptDuration: f.histogram("redis", "script_duration_seconds", "Latency of shaper's Lua script calls.",
			[]float64{.0002, .0005, .001, .002, .005, .01, .05, .1, .5, 1}, "script"),
		ScriptErrors:    f.counter("redis", "script_errors_total", "Lua script calls that failed or timed out.", "script"),
		Decisions:       f.counter("admission", "decisions_total", "Admission decisions by limiter and outcome (allowed, rejected, deferred, error).", "downstream", "limiter", "outcome"),
		Deferrals:       f.counter("admission", "deferrals_total", "Tasks enqueued to run at their Retry-After instead of being rejected.", "downstream"),
		FailOpen:        f.counter("admission", "fail_open_total", "Requests allowed without a decision because Redis failed and the policy is fail-open.", "downstream", "limiter"),
		CronTicks:       f.counter("cron", "ticks_total", "Cron ticks by outcome: enqueued, deferred, taken (by another process), rejected, error.", "job", "outcome"),
		Enqueued:        f.counter("queue", "enqueued_total", "Tasks enqueued.", "downstream"),
		Quarantined:     f.counter("queue", "quarantined_total", "Corrupt queue entries (no task hash, empty or undecodable msg, id mismatch) this process moved to the quarantine.", "downstream", "reason"),
		QuarantineLen:   f.gauge("queue", "quarantine_entries", "Entries in the downstream's quarantine list (shared by every process; bounded, expires).", "downstream"),
		ShadowDecisions: f.counter("admission", "shadow_decisions_total", "Decisions of admission limiters in shadow mode, none applied: allowed, rejected (would have), deferred (would have, under on_reject: defer), error.", "downstream", "limiter", "outcome"),
		ShadowLimiter:   f.gauge("admission", "shadow_mode", "1 while the admission limiter runs in shadow mode in this process, 0 while it is enforced.", "downstream", "limiter"),
		ShadowWait: f.histogram("shaping", "shadow_wait_seconds", "In shadow shaping, the wait each released task would have had (queue and slot) had the rate been enforced.",
			[]float64{.001, .01, .05, .1, .25, .5, 1, 2, 5, 10, 30, 60, 300, 1800, 3600}, "downstream"),
		FleetProtocols: f.gauge("fleet", "protocols", "Versions of the shared Redis state (keys.Protocol) among the live processes, as this process last counted them: above 1, processes of another shaper version keep other rules of the state, and every process must be upgraded together."),
		ShadowMode:     f.gauge("shaping", "shadow_mode", "1 while the downstream's shaping runs in shadow mode in this process (tasks are released at once), 0 while it is enforced.", "downstream"),
		DeadlinePassed: f.counter("shaping", "deadline_passed_total", "Tasks archived unsent, with reason \"deadline passed\", because their deadline came before their slot.", "downstream"),
		LateRejected:   f.counter("queue", "late_rejections_total", "Tasks refused at enqueue (on_late: reject) because their predicted start was past their deadline.", "downstream"),
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

// counter is shaper_<sub>_<name>, a counter by labels.
func (f factory) counter(sub, name, help string, labels ...string) *prometheus.CounterVec {
	return register(f.reg, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "shaper", Subsystem: sub, Name: name, Help: help}, labels))
}

// gauge is shaper_<sub>_<name>, a gauge by labels.
func (f factory) gauge(sub, name, help string, labels ...string) *prometheus.GaugeVec {
	return register(f.reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "shaper", Subsystem: sub, Name: name, Help: help}, labels))
}

// histogram is shaper_<sub>_<name>, a histogram by labels.
func (f factory) histogram(sub, name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return register(f.reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "shaper", Subsystem: sub, Name: name, Help: help,
		Buckets: buckets}, labels))
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
