// Package statuspage is shaper's live status page: one HTML page, rendered
// on the server and kept fresh by a little JavaScript that polls a JSON
// snapshot every second. It shows, per downstream, the configured rate, the
// rate in force, the achieved release rate over the last minute (with a
// sparkline of releases per second), the backlog by state, lateness,
// pushbacks, waits for a slot (reservations that found the bucket full),
// late skips, quarantined entries and the paused/adaptive state; and per admission limiter the allowed/rejected/deferred counts.
//
// Everything on it is this process's view: counters come from the process's
// Prometheus registry, so a fleet of shaper processes has one page each,
// and the fleet-wide view is the Grafana dashboard (docs/grafana-dashboard.json).
// The exception is the backlog, which is the queue's (shared) length.
//
// The page and its JSON are read-only and carry no secret: names, rates and
// counts only — never a Redis address, a handler URL or header, or a token.
// A request never touches Redis: the runtime state that lives there (rate
// override, adaptive rate) is read by the sampler, once per interval.
//
// Assets are embedded; the page loads nothing from another origin.
package statuspage

import (
	"context"
	"embed"
	"html/template"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/server"
	"github.com/shaper-io/shaper/shaping"
)

// Metric names the page reads (defined in internal/metrics).
const (
	mReleases   = "shaper_shaping_releases_total"
	mLateness   = "shaper_shaping_lateness_seconds"
	mBucketFull = "shaper_shaping_bucket_full_total"
	mLateSkips  = "shaper_shaping_late_skips_total"
	mPushbacks  = "shaper_shaping_pushbacks_total"
	mOutcomes   = "shaper_shaping_handler_outcomes_total"
	mBacklog    = "shaper_queue_tasks"
	mRate       = "shaper_shaping_rate_per_second"
	mHeld       = "shaper_shaping_held_tasks"
	mScript     = "shaper_redis_script_duration_seconds"
	mScriptErr  = "shaper_redis_script_errors_total"
	mDecisions  = "shaper_admission_decisions_total"
	mDeferrals  = "shaper_admission_deferrals_total"
	mFailOpen   = "shaper_admission_fail_open_total"
	mEnqueued   = "shaper_queue_enqueued_total"
	mQuarantine = "shaper_queue_quarantined_total"
	mQuarList   = "shaper_queue_quarantine_entries"
)

// BacklogStates are the queue states the page shows, in order.
var BacklogStates = []string{"pending", "active", "scheduled", "retry", "archived"}

// Outcomes are the decision outcomes the page shows per limiter, in order.
var Outcomes = []string{"allowed", "rejected", "deferred", "error"}

// Options configures a Page.
type Options struct {
	// Gatherer is the registry shaper's metrics (internal/metrics) are
	// registered on. Required.
	Gatherer prometheus.Gatherer
	// Dispatcher supplies the downstreams, their rate in force and their
	// paused state, and the runtime control read by the sampler. Required.
	Dispatcher *shaping.Dispatcher
	// Config, when set, supplies the configured rates, adaptive bounds,
	// schedules and admission limiters; nil shows the dispatcher's rates
	// as configured and no limiter that has not decided anything yet.
	Config *config.Config
	// Interval between samples; zero means 1s. The page polls at the same
	// interval.
	Interval time.Duration
	// Window is the span of the achieved rate, the sparkline and the
	// lateness quantiles; zero means 1m.
	Window time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Page serves the status page. Safe for concurrent use.
type Page struct {
	opts    Options
	tmpl    *template.Template
	started time.Time
	static  map[string]configured // by downstream

	mu      sync.Mutex
	ring    []sample // oldest first, at most Window/Interval+1
	control map[string]shaping.State
	ctlAt   time.Time
	ctlErr  string
}

type configured struct {
	rate     string
	adaptive *config.Adaptive
	schedule int
	limiters []config.Limiter
}

// sample is the cumulative state of the counters the page turns into rates.
type sample struct {
	at time.Time
	ds map[string]dsSample
	sc map[string]hist // script latency by script
}

type dsSample struct {
	releases float64
	lateness hist
}

//go:embed assets
var assets embed.FS

// New builds a Page and takes its first sample (the baseline of the
// achieved rate until the window fills). Call Run to keep sampling.
func New(opts Options) *Page {
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Window <= 0 {
		opts.Window = time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	p := &Page{opts: opts, static: map[string]configured{}, control: map[string]shaping.State{}}
	p.tmpl = template.Must(template.New("status.html").Funcs(template.FuncMap{
		"cell": func(v View, k string) string { return v.Cells[k] },
		"dk":   DownstreamKey,
		"lk":   LimiterKey,
		"sk":   ScriptKey,
	}).ParseFS(assets, "assets/status.html"))
	for _, ds := range opts.Dispatcher.Downstreams() {
		p.static[ds.Name] = configured{rate: ds.Rate.RateString()}
	}
	if c := opts.Config; c != nil {
		for _, dc := range c.Downstreams {
			s := configured{rate: dc.Rate.String(), adaptive: dc.Adaptive, schedule: len(dc.Schedule)}
			if dc.Admission != nil {
				s.limiters = dc.Admission.Limiters
			}
			p.static[dc.Name] = s
		}
	}
	p.started = opts.Now()
	p.record(p.take(p.started))
	return p
}

// Run samples every Interval until ctx ends.
func (p *Page) Run(ctx context.Context) {
	t := time.NewTicker(p.opts.Interval)
	defer t.Stop()
	for {
		p.readControl(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.record(p.take(p.opts.Now()))
		}
	}
}

// readControl caches the runtime state kept in Redis (override, adaptive
// rate), so that requests never reach Redis.
func (p *Page) readControl(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, max(p.opts.Interval, time.Second))
	defer cancel()
	st := map[string]shaping.State{}
	msg := ""
	// One Redis call per sample tells whether Redis answers; the states
	// come from the dispatcher's cache, which its control loop keeps
	// current (a call per downstream per second would be most of an idle
	// downstream's Redis cost).
	if err := p.opts.Dispatcher.Control().Ping(ctx); err != nil {
		msg = "redis unreachable: runtime state (override, adaptive rate) not refreshed"
	}
	for _, ds := range p.opts.Dispatcher.Downstreams() {
		if s, err := p.opts.Dispatcher.State(ds.Name); err == nil && msg == "" {
			st[ds.Name] = s
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ctlErr = msg
	if msg == "" {
		p.control, p.ctlAt = st, p.opts.Now()
	}
}

func (p *Page) gather() families {
	mfs, err := p.opts.Gatherer.Gather()
	if err != nil {
		// Gather returns what it could collect beside the error.
		p.opts.Logger.Warn("status page: gathering metrics", "err", err)
	}
	return index(mfs)
}

func (p *Page) take(now time.Time) sample {
	f := p.gather()
	return p.sampleOf(now, f)
}

func (p *Page) sampleOf(now time.Time, f families) sample {
	s := sample{at: now, ds: map[string]dsSample{}, sc: map[string]hist{}}
	for _, ds := range p.opts.Dispatcher.Downstreams() {
		l := map[string]string{"downstream": ds.Name}
		s.ds[ds.Name] = dsSample{releases: f.counter(mReleases, l), lateness: f.histogram(mLateness, l)}
	}
	for _, sc := range f.labelValues(mScript+"", "script", nil) {
		s.sc[sc] = f.histogram(mScript, map[string]string{"script": sc})
	}
	return s
}

func (p *Page) record(s sample) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ring = append(p.ring, s)
	if n := int(p.opts.Window/p.opts.Interval) + 1; len(p.ring) > n {
		p.ring = append(p.ring[:0], p.ring[len(p.ring)-n:]...)
	}
}

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
	// Redis is whether the sampler's last read of Redis worked; while it
	// does not, the backlog and runtime state on the page are stale.
	Redis RedisState `json:"redis"`
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
	Held     float64          `json:"held"`
	Lateness LatenessSnapshot `json:"lateness"`
	// Pushbacks: 429/503 answers with a pause that pushed the bucket back.
	PushbacksTotal float64 `json:"pushbacks_total"`
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
	// archived, panic, malformed).
	Outcomes map[string]float64 `json:"outcomes"`
}

// AdaptiveInfo is a downstream's AIMD rate.
type AdaptiveInfo struct {
	Floor   string `json:"floor"`
	Ceiling string `json:"ceiling"`
	// RatePerSecond is the shared adaptive rate; 0 until the first answer
	// moved it.
	RatePerSecond float64 `json:"rate_per_second"`
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

// Snapshot reads the metrics now and returns the page's data.
func (p *Page) Snapshot() Snapshot {
	now := p.opts.Now()
	f := p.gather()
	cur := p.sampleOf(now, f)

	p.mu.Lock()
	ring := append([]sample(nil), p.ring...)
	control := p.control
	warn := p.ctlErr
	ctlAt := p.ctlAt
	p.mu.Unlock()

	base := ring[0]
	for _, s := range ring {
		if now.Sub(s.at) <= p.opts.Window {
			base = s
			break
		}
	}
	span := now.Sub(base.at).Seconds()
	snap := Snapshot{GeneratedAt: now.UTC(), UptimeSeconds: now.Sub(p.started).Seconds(),
		IntervalSeconds: p.opts.Interval.Seconds(), WindowSeconds: span, Warning: warn}
	snap.Redis.Reachable = warn == ""
	if !ctlAt.IsZero() {
		at := ctlAt.UTC()
		snap.Redis.LastOK = &at
	}

	for _, ds := range p.opts.Dispatcher.Downstreams() {
		l := map[string]string{"downstream": ds.Name}
		st := p.static[ds.Name]
		rate, err := p.opts.Dispatcher.Rate(ds.Name)
		if err != nil {
			continue
		}
		paused, _ := p.opts.Dispatcher.Paused(ds.Name)
		d := DownstreamSnapshot{Name: ds.Name, ConfiguredRate: st.rate, RatePerSecond: rate.PerSec(),
			ScheduleChanges: st.schedule, Paused: paused, Workers: ds.Workers, MaxWait: ds.MaxWait.String(),
			ReleasesTotal: cur.ds[ds.Name].releases, Backlog: map[string]float64{}, Outcomes: map[string]float64{},
			Held: f.counter(mHeld, l), PushbacksTotal: f.counter(mPushbacks, l), BucketFullTotal: f.counter(mBucketFull, l),
			LateSkipsTotal: f.counter(mLateSkips, l), DeferralsTotal: f.counter(mDeferrals, l), EnqueuedTotal: f.counter(mEnqueued, l),
			QuarantinedTotal: f.counter(mQuarantine, l), QuarantineEntries: f.counter(mQuarList, l)}
		cs := control[ds.Name]
		if !cs.Override.IsZero() {
			d.OverrideRate = cs.Override.RateString()
		}
		if a := st.adaptive; a != nil {
			d.Adaptive = &AdaptiveInfo{Floor: a.Floor.String(), Ceiling: cmpOr(a.Ceiling.String(), st.rate), RatePerSecond: cs.Adaptive}
		}
		if span > 0 {
			d.AchievedPerSecond = (d.ReleasesTotal - base.ds[ds.Name].releases) / span
		}
		for i := 1; i < len(ring); i++ {
			if now.Sub(ring[i-1].at) > p.opts.Window+p.opts.Interval/2 {
				continue
			}
			dt := ring[i].at.Sub(ring[i-1].at).Seconds()
			if dt > 0 {
				d.PerSecond = append(d.PerSecond, (ring[i].ds[ds.Name].releases-ring[i-1].ds[ds.Name].releases)/dt)
			}
		}
		if d.PerSecond == nil {
			d.PerSecond = []float64{}
		}
		for _, s := range BacklogStates {
			if v, ok := f.value(mBacklog, map[string]string{"downstream": ds.Name, "state": s}); ok {
				d.Backlog[s] = v
			}
		}
		for _, o := range f.labelValues(mOutcomes, "outcome", l) {
			d.Outcomes[o] = f.counter(mOutcomes, map[string]string{"downstream": ds.Name, "outcome": o})
		}
		win := cur.ds[ds.Name].lateness.minus(base.ds[ds.Name].lateness)
		d.Lateness.Count = win.count
		if v, ok := win.quantile(0.5); ok {
			d.Lateness.P50Seconds = &v
		}
		if v, ok := win.quantile(0.99); ok {
			d.Lateness.P99Seconds = &v
		}
		if v, ok := win.mean(); ok {
			d.Lateness.MeanSeconds = &v
		}
		snap.Downstreams = append(snap.Downstreams, d)
	}

	snap.Limiters = p.limiters(f)
	for _, sc := range sortedKeys(cur.sc) {
		h := cur.sc[sc]
		s := ScriptSnapshot{Script: sc, CallsTotal: h.count, ErrorsTotal: f.counter(mScriptErr, map[string]string{"script": sc})}
		if v, ok := h.minus(base.sc[sc]).quantile(0.99); ok {
			s.P99Seconds = &v
		}
		snap.Scripts = append(snap.Scripts, s)
	}
	if snap.Limiters == nil {
		snap.Limiters = []LimiterSnapshot{}
	}
	if snap.Scripts == nil {
		snap.Scripts = []ScriptSnapshot{}
	}
	snap.View = view(snap)
	return snap
}

// limiters lists the configured admission limiters, then any other limiter
// that appears in the decisions metric, each with its counts.
func (p *Page) limiters(f families) []LimiterSnapshot {
	var out []LimiterSnapshot
	seen := map[[2]string]bool{}
	for _, ds := range p.opts.Dispatcher.Downstreams() {
		for _, lc := range p.static[ds.Name].limiters {
			out = append(out, LimiterSnapshot{Downstream: ds.Name, Name: lc.Name, Algorithm: string(lc.Algorithm),
				Key: string(lc.Key), Rate: lc.Rate.String(), Burst: lc.Burst})
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
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Mounter is where the page's routes go (*server.Server).
type Mounter interface {
	Handle(pattern string, h http.Handler)
}

// Mount mounts the page: GET / and GET /status (HTML), GET /status.json,
// and the page's script and style under /status/. All are open (no token)
// and read-only.
func (p *Page) Mount(m Mounter) {
	m.Handle("GET /{$}", http.HandlerFunc(p.serveHTML))
	m.Handle("GET /status", http.HandlerFunc(p.serveHTML))
	m.Handle("GET /status.json", http.HandlerFunc(p.serveJSON))
	m.Handle("GET /status/status.js", asset("assets/status.js", "text/javascript; charset=utf-8"))
	m.Handle("GET /status/status.css", asset("assets/status.css", "text/css; charset=utf-8"))
}

func headers(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
}

func (p *Page) serveJSON(w http.ResponseWriter, r *http.Request) {
	headers(w)
	server.WriteJSON(w, http.StatusOK, p.Snapshot())
}

// pageData is the template's input.
type pageData struct {
	Snapshot
	IntervalMs int64
	SparkW     int
	SparkH     int
	States     []string
	Outcomes   []string
}

func (p *Page) serveHTML(w http.ResponseWriter, r *http.Request) {
	headers(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	data := pageData{Snapshot: p.Snapshot(), IntervalMs: p.opts.Interval.Milliseconds(), SparkW: SparkW, SparkH: SparkH,
		States: BacklogStates, Outcomes: Outcomes}
	if err := p.tmpl.Execute(w, data); err != nil {
		p.opts.Logger.Warn("status page: render", "err", err)
	}
}

func asset(name, ctype string) http.Handler {
	b, err := assets.ReadFile(name)
	if err != nil {
		panic("statuspage: missing embedded " + name)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		headers(w)
		w.Header().Set("Content-Type", ctype)
		w.Write(b)
	})
}
