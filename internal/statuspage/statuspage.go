// Package statuspage is shaper's live status page: one HTML page, rendered
// on the server and kept fresh by a little JavaScript that polls a JSON
// snapshot every second.
//
// Each downstream has a card. Its headline is the achieved release rate
// over the last minute against the rate in force (with a sparkline of
// releases per second), the backlog, the predicted time to drain it, and
// the "why waiting" line: what holds the backlog now (WhyWaiting: paused,
// breaker, an announced hold, a quota, the announced pace, pushbacks, the
// concurrency cap, key ceilings, fair turns, tasks not due yet, or the
// rate). Its details fold away: the configured rate, override, adaptive
// rate and schedule, lateness, held tasks and workers, calls in flight,
// the fair share, pushbacks, waits for a slot, late skips, quarantined
// entries, handler outcomes, the circuit breaker, each quota's use and
// reset, the limit the downstream's answers announced, settled costs, the
// shaping mode (with, in shadow, the waits enforcing would have given),
// and tasks archived past their deadline or refused as late; the rows of
// features that are off, and of counts still zero, are hidden. Per
// admission limiter the page shows its mode and allowed/rejected/deferred
// counts, real and, in shadow, what it would have done.
//
// Counters come from this process's Prometheus registry (since it
// started). With Options.Fleet, every process publishes a summary to the
// others through Redis (Fleet), so the page lists every live process,
// this one marked, and the headline's achieved rate and the concurrency
// cap's calls in flight are the fleet's; the backlog is the queue's
// (shared) length.
//
// The page and its JSON are read-only and carry no secret: names, rates and
// counts only — never a Redis address, a handler URL or header, or a token.
// Tenant keys (a fair downstream's top keys) are shown, escaped by
// metrics.SafeKey, only to a request the server's Authorized lets see them
// (any request when no token is configured); the others see each key as a
// label that is stable for the life of the process and reveals nothing of
// it (hideKeys).
// A request never touches Redis: the runtime state that lives there (rate
// override, adaptive rate) and the fleet's summaries are read by the
// sampler, once per interval.
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

	"github.com/shaper-io/shaper/internal/plan"
	"github.com/shaper-io/shaper/internal/server"
	"github.com/shaper-io/shaper/shaping"
)

// Metric names the page reads (defined in internal/metrics).
const (
	mReleases    = "shaper_shaping_releases_total"
	mLateness    = "shaper_shaping_lateness_seconds"
	mBucketFull  = "shaper_shaping_bucket_full_total"
	mLateSkips   = "shaper_shaping_late_skips_total"
	mPushbacks   = "shaper_shaping_pushbacks_total"
	mOutcomes    = "shaper_shaping_handler_outcomes_total"
	mBacklog     = "shaper_queue_tasks"
	mRate        = "shaper_shaping_rate_per_second"
	mHeld        = "shaper_shaping_held_tasks"
	mLeases      = "shaper_shaping_leases_in_use"
	mConcLimit   = "shaper_shaping_concurrency_limit"
	mFairKeys    = "shaper_fair_active_keys"
	mFairWaiting = "shaper_fair_waiting_tasks"
	mFairJain    = "shaper_fair_jain_index"
	mFairKeyRel  = "shaper_fair_key_releases"
	mScript      = "shaper_redis_script_duration_seconds"
	mScriptErr   = "shaper_redis_script_errors_total"
	mDecisions   = "shaper_admission_decisions_total"
	mDeferrals   = "shaper_admission_deferrals_total"
	mFailOpen    = "shaper_admission_fail_open_total"
	mEnqueued    = "shaper_queue_enqueued_total"
	mQuarantine  = "shaper_queue_quarantined_total"
	mQuarList    = "shaper_queue_quarantine_entries"
	mBrkMoves    = "shaper_shaping_breaker_transitions_total"
	mShadowDec   = "shaper_admission_shadow_decisions_total"
	mShadowWait  = "shaper_shaping_shadow_wait_seconds"
	mDeadline    = "shaper_shaping_deadline_passed_total"
	mLateRej     = "shaper_queue_late_rejections_total"
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
	// Plan, when set, supplies the configured rates, adaptive bounds,
	// schedules and admission limiters as the config file writes them;
	// nil shows the dispatcher's rates as configured and no limiter that
	// has not decided anything yet.
	Plan *plan.Plan
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
	// Fleet, when set, shares this process's summary with the others
	// sharing its Redis and shows theirs (NewFleet).
	Fleet *Fleet
}

// Page serves the status page. Safe for concurrent use.
type Page struct {
	opts    Options
	tmpl    *template.Template
	started time.Time
	static  map[string]configured // by downstream
	keySalt []byte                // keys' labels for requests without the token

	mu      sync.Mutex
	ring    []sample // oldest first, at most Window/Interval+1
	control map[string]shaping.State
	ctlAt   time.Time
	ctlErr  string
	fleet   []ProcessSnapshot // as Run last read it
}

type configured struct {
	rate     string
	adaptive *plan.WrittenAdaptive
	schedule int
	limiters []plan.WrittenLimiter
}

// sample is the cumulative state of the counters the page turns into rates.
type sample struct {
	at time.Time
	ds map[string]dsSample
	sc map[string]hist // script latency by script
}

type dsSample struct {
	releases   float64
	pushbacks  float64
	lateness   hist
	shadowWait hist
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
	p := &Page{opts: opts, static: map[string]configured{}, control: map[string]shaping.State{}, keySalt: newKeySalt()}
	p.tmpl = template.Must(template.New("status.html").Funcs(template.FuncMap{
		"cell": func(v View, k string) string { return v.Cells[k] },
		"off":  func(v View, k string) bool { return !v.Rows[k] },
		"dk":   DownstreamKey,
		"lk":   LimiterKey,
		"sk":   ScriptKey,
	}).ParseFS(assets, "assets/status.html"))
	for _, ds := range opts.Dispatcher.Downstreams() {
		p.static[ds.Name] = configured{rate: ds.Rate.RateString()}
	}
	if pl := opts.Plan; pl != nil {
		for _, pd := range pl.Downstreams {
			w := pd.Written
			p.static[pd.Shaping.Name] = configured{rate: w.Rate, adaptive: w.Adaptive, schedule: w.Schedule, limiters: w.Limiters}
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
		p.readRedis(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.record(p.take(p.opts.Now()))
		}
	}
}

// readRedis is what the page reads from Redis each Interval: the fleet's
// summaries (publishing this process's when due), whose read also says
// whether Redis answers, or without a fleet one call that says only that.
func (p *Page) readRedis(ctx context.Context) {
	var err error
	if p.opts.Fleet != nil {
		err = p.readFleet(ctx)
	} else {
		ctx, cancel := context.WithTimeout(ctx, max(p.opts.Interval, time.Second))
		err = p.opts.Dispatcher.Control().Ping(ctx)
		cancel()
	}
	p.readControl(err)
}

// readFleet publishes this process's summary and caches the fleet's; an
// error says Redis did not answer.
func (p *Page) readFleet(ctx context.Context) error {
	fl := p.opts.Fleet
	ctx, cancel := context.WithTimeout(ctx, max(p.opts.Interval, time.Second))
	defer cancel()
	// a snapshot (a gather of every metric) only when the summary is due
	now := p.opts.Now()
	var s *Snapshot
	if fl.due(now) {
		snap := p.Snapshot()
		s = &snap
	}
	all, err := fl.exchange(ctx, s, now)
	if err != nil {
		p.opts.Logger.Debug("status page: cannot share the fleet's summaries", "err", err)
		return err
	}
	p.mu.Lock()
	p.fleet = all
	p.mu.Unlock()
	return nil
}

// readControl caches the runtime state (override, adaptive rate), so that
// requests never reach Redis: the states come from the dispatcher's
// cache, which its control loop keeps current (a call per downstream per
// second would be most of an idle downstream's Redis cost). unreachable
// is the error of this Interval's Redis call (readRedis), if any.
func (p *Page) readControl(unreachable error) {
	st := map[string]shaping.State{}
	msg := ""
	if unreachable != nil {
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
		s.ds[ds.Name] = dsSample{releases: f.counter(mReleases, l), pushbacks: f.counter(mPushbacks, l), lateness: f.histogram(mLateness, l),
			shadowWait: f.histogram(mShadowWait, l)}
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

// Mounter is where the page's routes go (*server.Server): Handle mounts
// an open route, Authorized tells whether a request may see tenant keys.
type Mounter interface {
	Handle(pattern string, h http.Handler)
	Authorized(r *http.Request) bool
}

var _ Mounter = (*server.Server)(nil)

// Mount mounts the page: GET / and GET /status (HTML; ?details=open
// renders every card's details unfolded), GET /status.json, and the
// page's script and style under /status/. All are open and read-only; a
// request m.Authorized refuses sees no tenant key.
func (p *Page) Mount(m Mounter) {
	html := func(w http.ResponseWriter, r *http.Request) { p.serveHTML(w, r, m.Authorized(r)) }
	m.Handle("GET /{$}", http.HandlerFunc(html))
	m.Handle("GET /status", http.HandlerFunc(html))
	m.Handle("GET /status.json", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.serveJSON(w, r, m.Authorized(r))
	}))
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

func (p *Page) serveJSON(w http.ResponseWriter, r *http.Request, showKeys bool) {
	headers(w)
	w.Header().Add("Vary", "Authorization")
	server.WriteJSON(w, http.StatusOK, p.snapshot(showKeys))
}

// pageData is the template's input.
type pageData struct {
	Snapshot
	IntervalMs int64
	SparkW     int
	SparkH     int
	States     []string
	Outcomes   []string
	// Open renders the cards' details unfolded (GET /?details=open).
	Open bool
}

func (p *Page) serveHTML(w http.ResponseWriter, r *http.Request, showKeys bool) {
	headers(w)
	w.Header().Add("Vary", "Authorization")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	data := pageData{Snapshot: p.snapshot(showKeys), IntervalMs: p.opts.Interval.Milliseconds(), SparkW: SparkW, SparkH: SparkH,
		States: BacklogStates, Outcomes: Outcomes, Open: r.URL.Query().Get("details") == "open"}
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
