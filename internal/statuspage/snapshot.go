package statuspage

import (
	"sort"
	"time"

	"github.com/shaper-io/shaper/internal/metrics"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/shaping"
)

// Snapshot is what GET /status.json returns.
type Snapshot struct {
	GeneratedAt time.Time `json:"generated_at"`
	// UptimeSeconds is how long this page has been sampling.
	UptimeSeconds float64 `json:"uptime_seconds"`
	// IntervalSeconds is the sampling (and polling) interval.
	IntervalSeconds float64 `json:"interval_seconds"`
	// WindowSeconds is the span the windowed figures cover: up to the
	// configured window, less while the process is younger.
	WindowSeconds float64              `json:"window_seconds"`
	Downstreams   []DownstreamSnapshot `json:"downstreams"`
	Limiters      []LimiterSnapshot    `json:"limiters"`
	Scripts       []ScriptSnapshot     `json:"scripts"`
	// Warning is set when the runtime state could not be read from Redis.
	Warning string `json:"warning,omitempty"`
	// KeysHidden is set when the request may not see tenant keys (a token
	// is configured and the request did not carry it): every key shown is
	// a label that stands for it (KeyReleases.Hidden).
	KeysHidden bool `json:"keys_hidden,omitempty"`
	// Redis is whether the sampler's last read of Redis worked; while it
	// does not, the backlog and runtime state on the page are stale.
	Redis RedisState `json:"redis"`
	// Fleet is every live process sharing the Redis (this one included),
	// as their pages last published (Options.Fleet; nil without it);
	// Self is this process's ID among them.
	Fleet []ProcessSnapshot `json:"fleet,omitempty"`
	Self  string            `json:"self,omitempty"`
	// View is the page's formatted text, by element key, and the
	// sparklines' SVG points; the page's script copies it into the DOM.
	View View `json:"view"`
}

// RedisState is the sampler's view of Redis.
type RedisState struct {
	Reachable bool `json:"reachable"`
	// LastOK is the last successful read; nil before the first one.
	LastOK *time.Time `json:"last_ok,omitempty"`
}

// DownstreamSnapshot is one downstream. Counters (…_total) count since this
// process started.
type DownstreamSnapshot struct {
	Name string `json:"name"`
	// ConfiguredRate is the rate in the config, e.g. "50/s".
	ConfiguredRate string `json:"configured_rate"`
	// RatePerSecond is the rate this process releases at now: schedule,
	// override and adaptive rate applied.
	RatePerSecond float64 `json:"rate_per_second"`
	// OverrideRate is the runtime override (shaper ctl rate), "" if none.
	OverrideRate string        `json:"override_rate,omitempty"`
	Adaptive     *AdaptiveInfo `json:"adaptive,omitempty"`
	// ScheduleChanges is the number of time-of-day rate changes configured.
	ScheduleChanges int    `json:"schedule_changes,omitempty"`
	Paused          bool   `json:"paused"`
	Workers         int    `json:"workers"`
	MaxWait         string `json:"max_wait"`
	// AchievedPerSecond is releases per second over WindowSeconds.
	AchievedPerSecond float64 `json:"achieved_per_second"`
	// PerSecond is releases per second in each sampling interval of the
	// window, oldest first (the sparkline).
	PerSecond     []float64          `json:"per_second"`
	ReleasesTotal float64            `json:"releases_total"`
	Backlog       map[string]float64 `json:"backlog"`
	// Held is tasks this process holds while they wait for their slot.
	Held float64 `json:"held"`
	// LeasesInUse is the calls in flight this process holds a concurrency
	// lease for; ConcurrencyLimit the downstream's cap (0: none).
	LeasesInUse      float64 `json:"leases_in_use"`
	ConcurrencyLimit float64 `json:"concurrency_limit"`
	// Fair is the fair share's state; nil without fairness.
	Fair     *FairInfo        `json:"fair,omitempty"`
	Lateness LatenessSnapshot `json:"lateness"`
	// Pushbacks: 429/503 answers with a pause that pushed the bucket back;
	// RecentPushbacks those in the last RecentSpan.
	PushbacksTotal  float64 `json:"pushbacks_total"`
	RecentPushbacks float64 `json:"recent_pushbacks"`
	// BucketFullTotal counts reservation attempts that found the bucket
	// full (the slot would lie past max_wait): the task stays held and
	// asks again once a slot frees. It is how a backlog waits, not an error.
	BucketFullTotal float64 `json:"bucket_full_total"`
	LateSkipsTotal  float64 `json:"late_skips_total"`
	DeferralsTotal  float64 `json:"deferrals_total"`
	EnqueuedTotal   float64 `json:"enqueued_total"`
	// QuarantinedTotal counts corrupt queue entries this process moved to
	// the quarantine; QuarantineEntries is the (shared) quarantine's length.
	QuarantinedTotal  float64 `json:"quarantined_total"`
	QuarantineEntries float64 `json:"quarantine_entries"`
	// Outcomes are handler results by outcome (success, retry, throttled,
	// outage, archived, panic, malformed, deadline_passed).
	Outcomes map[string]float64 `json:"outcomes"`
	// ShapingMode is "enforce" or "shadow" (shaper ctl mode); in shadow
	// tasks are released at once and ShadowWait is the wait each would
	// have had, over the window.
	ShapingMode string           `json:"shaping_mode"`
	ShadowWait  LatenessSnapshot `json:"shadow_wait"`
	// DeadlinePassedTotal counts tasks archived unsent because their
	// deadline came first; LateRejectedTotal tasks this process refused at
	// enqueue as late (on_late: reject).
	DeadlinePassedTotal float64 `json:"deadline_passed_total"`
	LateRejectedTotal   float64 `json:"late_rejected_total"`
	// Breaker is the circuit breaker; nil when the downstream has none.
	Breaker *BreakerInfo `json:"breaker,omitempty"`
	// Quotas are the downstream's quotas at this process's last
	// reservation; HeldBy is what held that reservation ("" none, "quota
	// …", "announced", "announced pace").
	Quotas []QuotaSnapshot `json:"quotas,omitempty"`
	HeldBy string          `json:"held_by,omitempty"`
	// Announced is the last binding limit the downstream's answers
	// announced to this process; AnnouncedPacePerSecond the pace it
	// imposed on the last reservation (0: the rate applies).
	Announced              *AnnouncedSnapshot `json:"announced,omitempty"`
	AnnouncedPacePerSecond float64            `json:"announced_pace_per_second"`
	// Clamp is the last answer whose hold or cost was cut (max_hold, the
	// cost cap) or refused, with the header that said it; nil when none.
	Clamp *ClampSnapshot `json:"clamp,omitempty"`
	// Settled…Total are cost units charged or refunded after calls.
	SettledChargedTotal  float64 `json:"settled_charged_total"`
	SettledRefundedTotal float64 `json:"settled_refunded_total"`
	// Fleet is the downstream's figures summed over every live process
	// (this one's as of now); nil without Options.Fleet.
	Fleet *FleetDownstream `json:"fleet,omitempty"`
	// Why is what holds the backlog now (WhyWaiting); DrainSeconds the
	// predicted time to drain it (DrainSeconds), nil when it does not
	// drain by itself or nothing waits.
	Why          Why      `json:"why"`
	DrainSeconds *float64 `json:"drain_seconds,omitempty"`
}

// FleetDownstream is a downstream's figures summed over the fleet's live
// processes.
type FleetDownstream struct {
	// Processes is how many live processes serve the downstream.
	Processes         int     `json:"processes"`
	AchievedPerSecond float64 `json:"achieved_per_second"`
	Held              float64 `json:"held"`
	// LeasesInUse is the calls in flight under the concurrency cap.
	LeasesInUse float64 `json:"leases_in_use"`
}

// BreakerInfo is a downstream's circuit breaker as this process last saw
// it (its state is shared by every process; its transitions are each made
// by one of them).
type BreakerInfo struct {
	// State is closed, open or half_open.
	State string `json:"state"`
	// Since is when the state began (nil: closed since the breaker's key
	// expired, or never opened).
	Since *time.Time `json:"since,omitempty"`
	// OpenUntil is when an open breaker's cool-down ends.
	OpenUntil *time.Time `json:"open_until,omitempty"`
	// Transitions this process made, by the state moved to.
	Transitions map[string]float64 `json:"transitions"`
	// Settings are its thresholds, defaults filled in.
	Settings string `json:"settings"`
}

// AdaptiveInfo is a downstream's AIMD rate.
type AdaptiveInfo struct {
	Floor   string `json:"floor"`
	Ceiling string `json:"ceiling"`
	// RatePerSecond is the shared adaptive rate; 0 until the first answer
	// moved it.
	RatePerSecond float64 `json:"rate_per_second"`
}

// FairInfo is a fair downstream's share among its keys.
type FairInfo struct {
	// ActiveKeys have tasks waiting in fair order; WaitingTasks is how many
	// tasks (shared by every process).
	ActiveKeys   float64 `json:"active_keys"`
	WaitingTasks float64 `json:"waiting_tasks"`
	// JainIndex of this process's releases over the last minute, per unit
	// of weight, among keys with a backlog (1: equal shares).
	JainIndex float64 `json:"jain_index"`
	// TopKeys are the keys with the most releases by this process in the
	// last minute (at most metrics.FairTopKeys), most first.
	TopKeys []KeyReleases `json:"top_keys"`
	// KeyRate is the per-key ceiling (key_rate, e.g. "5/s") and
	// KeyRatePerSecond its units per second; "" and 0 without one.
	KeyRate          string  `json:"key_rate,omitempty"`
	KeyRatePerSecond float64 `json:"key_rate_per_second,omitempty"`
	// KeyControls are the operator's settings per key in force (shaper ctl
	// key), at most maxKeyControlsShown of them, by key; KeyControlCount
	// is how many keys have one.
	KeyControls     []KeyControlInfo `json:"key_controls,omitempty"`
	KeyControlCount int              `json:"key_control_count,omitempty"`
}

// KeyControlInfo is one key's runtime settings: its own ceiling, weight,
// or a pause. Key is escaped or hidden as in KeyReleases.
type KeyControlInfo struct {
	Key    string  `json:"key"`
	Hidden bool    `json:"hidden,omitempty"`
	Rate   string  `json:"rate,omitempty"`
	Weight float64 `json:"weight,omitempty"`
	Paused bool    `json:"paused,omitempty"`
}

// KeyReleases is one key's releases in the last minute.
type KeyReleases struct {
	// Key is the tenant key escaped by metrics.SafeKey or, when Hidden,
	// a label standing for it ("#" and 8 hex digits), the same for the
	// same key for the life of the process.
	Key      string  `json:"key"`
	Hidden   bool    `json:"hidden,omitempty"`
	Releases float64 `json:"releases"`
}

// fairInfo reads ds's fair-share metrics.
func fairInfo(f families, l map[string]string) *FairInfo {
	fi := &FairInfo{ActiveKeys: f.counter(mFairKeys, l), WaitingTasks: f.counter(mFairWaiting, l), JainIndex: f.counter(mFairJain, l)}
	for _, k := range f.labelValues(mFairKeyRel, metrics.KeyLabel, l) {
		fi.TopKeys = append(fi.TopKeys, KeyReleases{Key: metrics.SafeKey(k),
			Releases: f.counter(mFairKeyRel, map[string]string{"downstream": l["downstream"], metrics.KeyLabel: k})})
	}
	sort.Slice(fi.TopKeys, func(i, j int) bool { return fi.TopKeys[i].Releases > fi.TopKeys[j].Releases })
	return fi
}

// LatenessSnapshot is release time minus slot time over the window,
// estimated from the histogram's buckets as histogram_quantile does.
type LatenessSnapshot struct {
	Count       float64  `json:"count"`
	P50Seconds  *float64 `json:"p50_seconds"`
	P99Seconds  *float64 `json:"p99_seconds"`
	MeanSeconds *float64 `json:"mean_seconds"`
}

// LimiterSnapshot is one admission limiter's decisions in this process.
type LimiterSnapshot struct {
	Downstream string `json:"downstream"`
	Name       string `json:"name"`
	Algorithm  string `json:"algorithm,omitempty"`
	Key        string `json:"key,omitempty"`
	Rate       string `json:"rate,omitempty"`
	Burst      int64  `json:"burst,omitempty"`
	// Decisions by outcome: allowed, rejected, deferred, error.
	Decisions map[string]float64 `json:"decisions"`
	FailOpen  float64            `json:"fail_open"`
	// Mode is "enforce" or "shadow", as configured and switched at
	// runtime (shaper ctl mode).
	Mode string `json:"mode"`
	// Shadow is what the limiter decided while in shadow, none of it
	// applied: allowed, rejected, deferred (would have been), error.
	Shadow map[string]float64 `json:"shadow"`
}

// ScriptSnapshot is one Lua script's latency in this process.
type ScriptSnapshot struct {
	Script      string   `json:"script"`
	CallsTotal  float64  `json:"calls_total"`
	ErrorsTotal float64  `json:"errors_total"`
	P99Seconds  *float64 `json:"p99_seconds"`
}

// View is the page's text and sparklines.
type View struct {
	// Cells maps an element's data-k key to its text.
	Cells map[string]string `json:"cells"`
	// Sparks maps a downstream to its sparkline.
	Sparks map[string]Spark `json:"sparks"`
	// Rows maps a card's detail row (its data-row key, DownstreamKey of
	// the row's field) to whether it is shown: the rows of features that
	// are off, and of counts still zero, are hidden.
	Rows map[string]bool `json:"rows"`
	// Processes are the live processes, one line each, this one marked.
	Processes []ProcessRow `json:"processes"`
}

// ProcessRow is one live process on the page.
type ProcessRow struct {
	ID string `json:"id"`
	// Self marks the process that serves the page.
	Self bool `json:"self"`
	// Text is its address, when it was last heard of and what it does
	// per downstream.
	Text string `json:"text"`
}

// Spark is a sparkline: SVG polyline points in a SparkW×SparkH box, and
// the height of the rate-in-force line.
type Spark struct {
	Points string  `json:"points"`
	RateY  float64 `json:"rate_y"`
	Max    float64 `json:"max"`
}

// Sparkline box.
const (
	SparkW = 180
	SparkH = 36
)

// Snapshot reads the metrics now and returns the page's data, tenant keys
// included (as a request with the token sees it).
func (p *Page) Snapshot() Snapshot { return p.snapshot(true) }

// snapshot is Snapshot; without showKeys, every tenant key is hidden.
func (p *Page) snapshot(showKeys bool) Snapshot {
	now := p.opts.Now()
	f := p.gather()
	w := window{now: now, cur: p.sampleOf(now, f)}

	p.mu.Lock()
	w.ring = append([]sample(nil), p.ring...)
	control := p.control
	warn := p.ctlErr
	ctlAt := p.ctlAt
	p.mu.Unlock()

	w.base = w.ring[0]
	for _, s := range w.ring {
		if now.Sub(s.at) <= p.opts.Window {
			w.base = s
			break
		}
	}
	w.span = now.Sub(w.base.at).Seconds()
	snap := Snapshot{GeneratedAt: now.UTC(), UptimeSeconds: now.Sub(p.started).Seconds(),
		IntervalSeconds: p.opts.Interval.Seconds(), WindowSeconds: w.span, Warning: warn}
	snap.Redis.Reachable = warn == ""
	if !ctlAt.IsZero() {
		at := ctlAt.UTC()
		snap.Redis.LastOK = &at
	}
	for _, ds := range p.opts.Dispatcher.Downstreams() {
		if d, ok := p.downstream(ds, f, w, control[ds.Name]); ok {
			snap.Downstreams = append(snap.Downstreams, d)
		}
	}
	snap.Limiters = p.limiters(f, control)
	if snap.Limiters == nil {
		snap.Limiters = []LimiterSnapshot{}
	}
	snap.Scripts = scripts(f, w)
	p.mu.Lock()
	snap.Fleet = p.fleet
	p.mu.Unlock()
	if fl := p.opts.Fleet; fl != nil {
		snap.Self = fl.self.ID
	}
	for i := range snap.Downstreams {
		d := &snap.Downstreams[i]
		if p.opts.Fleet != nil {
			d.Fleet = fleetDownstream(snap.Fleet, snap.Self, *d)
		}
		d.Why = WhyWaiting(*d, now, snap.Redis.Reachable)
		if s, ok := DrainSeconds(*d, d.Why); ok {
			d.DrainSeconds = &s
		}
	}
	if !showKeys {
		p.hideKeys(&snap)
	}
	snap.View = view(snap)
	return snap
}

// window is the samples a snapshot turns into rates: cur (now), base (the
// oldest within the window) and the ring they come from.
type window struct {
	now       time.Time
	cur, base sample
	ring      []sample
	span      float64 // seconds from base to now
}

// since is the oldest sample of the ring within span of now (cur when
// there is none).
func (w window) since(span time.Duration) sample {
	for _, s := range w.ring {
		if w.now.Sub(s.at) <= span {
			return s
		}
	}
	return w.cur
}

// downstream is one downstream's part of the snapshot; false when the
// dispatcher no longer knows it.
func (p *Page) downstream(ds shaping.Downstream, f families, w window, cs shaping.State) (DownstreamSnapshot, bool) {
	l := map[string]string{"downstream": ds.Name}
	st := p.static[ds.Name]
	rate, err := p.opts.Dispatcher.Rate(ds.Name)
	if err != nil {
		return DownstreamSnapshot{}, false
	}
	paused, _ := p.opts.Dispatcher.Paused(ds.Name)
	d := DownstreamSnapshot{Name: ds.Name, ConfiguredRate: st.rate, RatePerSecond: rate.PerSec(),
		ScheduleChanges: st.schedule, Paused: paused, Workers: ds.Workers, MaxWait: ds.MaxWait.String(),
		ReleasesTotal: w.cur.ds[ds.Name].releases, Backlog: map[string]float64{}, Outcomes: map[string]float64{},
		Held: f.counter(mHeld, l), PushbacksTotal: f.counter(mPushbacks, l), BucketFullTotal: f.counter(mBucketFull, l),
		LateSkipsTotal: f.counter(mLateSkips, l), DeferralsTotal: f.counter(mDeferrals, l), EnqueuedTotal: f.counter(mEnqueued, l),
		QuarantinedTotal: f.counter(mQuarantine, l), QuarantineEntries: f.counter(mQuarList, l),
		LeasesInUse: f.counter(mLeases, l), ConcurrencyLimit: f.counter(mConcLimit, l)}
	if !cs.Override.IsZero() {
		d.OverrideRate = cs.Override.RateString()
	}
	if ds.Fairness != nil {
		d.Fair = fairInfo(f, l)
		if kr := ds.Fairness.KeyRate; !kr.IsZero() {
			d.Fair.KeyRate, d.Fair.KeyRatePerSecond = kr.RateString(), kr.PerSec()
		}
		d.Fair.KeyControls, d.Fair.KeyControlCount = keyControls(ds.Fairness)
	}
	d.RecentPushbacks = d.PushbacksTotal - w.since(RecentSpan).ds[ds.Name].pushbacks
	if a := st.adaptive; a != nil {
		d.Adaptive = &AdaptiveInfo{Floor: a.Floor, Ceiling: cmpOr(a.Ceiling, st.rate), RatePerSecond: cs.Adaptive}
	}
	if w.span > 0 {
		d.AchievedPerSecond = (d.ReleasesTotal - w.base.ds[ds.Name].releases) / w.span
	}
	d.PerSecond = p.perSecond(ds.Name, w)
	for _, s := range BacklogStates {
		if v, ok := f.value(mBacklog, map[string]string{"downstream": ds.Name, "state": s}); ok {
			d.Backlog[s] = v
		}
	}
	for _, o := range f.labelValues(mOutcomes, "outcome", l) {
		d.Outcomes[o] = f.counter(mOutcomes, map[string]string{"downstream": ds.Name, "outcome": o})
	}
	d.Lateness = lateness(w.cur.ds[ds.Name].lateness.minus(w.base.ds[ds.Name].lateness))
	d.Breaker = p.breaker(ds, f)
	p.limits(&d, f, w.now)
	d.ShadowWait = lateness(w.cur.ds[ds.Name].shadowWait.minus(w.base.ds[ds.Name].shadowWait))
	d.ShapingMode = "enforce"
	if m, err := p.opts.Dispatcher.Mode(ds.Name); err == nil {
		d.ShapingMode = m.String()
	}
	d.DeadlinePassedTotal, d.LateRejectedTotal = f.counter(mDeadline, l), f.counter(mLateRej, l)
	return d, true
}

// breaker is a downstream's breaker part of the snapshot (nil: none).
func (p *Page) breaker(ds shaping.Downstream, f families) *BreakerInfo {
	if ds.Breaker == nil {
		return nil
	}
	st, err := p.opts.Dispatcher.Breaker(ds.Name)
	if err != nil {
		return nil
	}
	b := &BreakerInfo{State: st.Mode.String(), Transitions: map[string]float64{}, Settings: ds.Breaker.String()}
	if !st.Since.IsZero() {
		at := st.Since.UTC()
		b.Since = &at
	}
	if !st.Until.IsZero() {
		at := st.Until.UTC()
		b.OpenUntil = &at
	}
	for _, to := range f.labelValues(mBrkMoves, "to", map[string]string{"downstream": ds.Name}) {
		b.Transitions[to] = f.counter(mBrkMoves, map[string]string{"downstream": ds.Name, "to": to})
	}
	return b
}

// perSecond is a downstream's releases per second in each sampling
// interval of the window, oldest first (never nil: the JSON has a list).
func (p *Page) perSecond(name string, w window) []float64 {
	out := []float64{}
	for i := 1; i < len(w.ring); i++ {
		if w.now.Sub(w.ring[i-1].at) > p.opts.Window+p.opts.Interval/2 {
			continue
		}
		dt := w.ring[i].at.Sub(w.ring[i-1].at).Seconds()
		if dt > 0 {
			out = append(out, (w.ring[i].ds[name].releases-w.ring[i-1].ds[name].releases)/dt)
		}
	}
	return out
}

// lateness is the window's lateness histogram as quantiles and mean.
func lateness(win hist) LatenessSnapshot {
	l := LatenessSnapshot{Count: win.count}
	if v, ok := win.quantile(0.5); ok {
		l.P50Seconds = &v
	}
	if v, ok := win.quantile(0.99); ok {
		l.P99Seconds = &v
	}
	if v, ok := win.mean(); ok {
		l.MeanSeconds = &v
	}
	return l
}

// scripts is each Lua script's calls, errors and p99 over the window.
func scripts(f families, w window) []ScriptSnapshot {
	out := []ScriptSnapshot{}
	for _, sc := range sortedKeys(w.cur.sc) {
		h := w.cur.sc[sc]
		s := ScriptSnapshot{Script: sc, CallsTotal: h.count, ErrorsTotal: f.counter(mScriptErr, map[string]string{"script": sc})}
		if v, ok := h.minus(w.base.sc[sc]).quantile(0.99); ok {
			s.P99Seconds = &v
		}
		out = append(out, s)
	}
	return out
}

// limiters lists the configured admission limiters, then any other limiter
// that appears in the decisions metric, each with its counts.
func (p *Page) limiters(f families, control map[string]shaping.State) []LimiterSnapshot {
	var out []LimiterSnapshot
	seen := map[[2]string]bool{}
	for _, ds := range p.opts.Dispatcher.Downstreams() {
		for _, lc := range p.static[ds.Name].limiters {
			out = append(out, LimiterSnapshot{Downstream: ds.Name, Name: lc.Name, Algorithm: lc.Algorithm,
				Key: lc.Key, Rate: lc.Rate, Burst: lc.Burst, Mode: control[ds.Name].ModeOf(lc.Name, lc.Mode).String()})
			seen[[2]string{ds.Name, lc.Name}] = true
		}
	}
	for _, ds := range f.labelValues(mDecisions, "downstream", nil) {
		for _, name := range f.labelValues(mDecisions, "limiter", map[string]string{"downstream": ds}) {
			if !seen[[2]string{ds, name}] {
				out = append(out, LimiterSnapshot{Downstream: ds, Name: name})
				seen[[2]string{ds, name}] = true
			}
		}
	}
	for i := range out {
		l := &out[i]
		l.Decisions = map[string]float64{}
		for _, o := range Outcomes {
			l.Decisions[o] = f.counter(mDecisions, map[string]string{"downstream": l.Downstream, "limiter": l.Name, "outcome": o})
		}
		l.FailOpen = f.counter(mFailOpen, map[string]string{"downstream": l.Downstream, "limiter": l.Name})
		l.Shadow = map[string]float64{}
		for _, o := range Outcomes {
			l.Shadow[o] = f.counter(mShadowDec, map[string]string{"downstream": l.Downstream, "limiter": l.Name, "outcome": o})
		}
		if l.Mode == "" {
			l.Mode = control[l.Downstream].ModeOf(l.Name, limiters.Enforce).String()
		}
	}
	return out
}
