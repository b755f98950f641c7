package statuspage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"log/slog"
	"math"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/app"
	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/metrics"
	"github.com/shaper-io/shaper/internal/plan"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/server"
	"github.com/shaper-io/shaper/internal/statuspage"
	itestutil "github.com/shaper-io/shaper/internal/testutil"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// bundle is a dispatcher, producer and page over one config and registry.
type bundle struct {
	cfg  *config.Config
	pl   *plan.Plan
	reg  *prometheus.Registry
	m    *metrics.Metrics
	d    *shaping.Dispatcher
	p    *queue.Producer
	page *statuspage.Page
	url  string // the server's, http://host:port
}

type setupOpts struct {
	yaml    string // downstreams and the rest; redis is filled in
	handler shaping.HandlerFunc
	now     func() time.Time
	rdb     redis.UniversalClient // nil: redistest.Client
	token   string                // the server's bearer token; "" none
	// metricsKeys is http.metrics_keys: /metrics serves the series
	// labelled with a tenant key.
	metricsKeys bool
}

func setup(t *testing.T, o setupOpts) *bundle {
	t.Helper()
	rdb := o.rdb
	if rdb == nil {
		rdb = redistest.Client(t)
	}
	prefix := redistest.Prefix(t)
	cfg, err := config.Parse([]byte(fmt.Sprintf("redis: {url: %q, prefix: %q}\n", redistest.URL(t), prefix) + o.yaml))
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{cfg: cfg, reg: prometheus.NewRegistry()}
	b.m = metrics.New(b.reg)
	b.d = shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: quiet, Registerer: b.reg, ShutdownTimeout: 5 * time.Second,
		ControlInterval: 50 * time.Millisecond})
	pl, err := plan.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.pl = pl
	for _, pd := range pl.Downstreams {
		h := o.handler
		if h == nil {
			h = func(context.Context, *shaping.Task) error { return nil }
		}
		sd := pd.Shaping
		if err := b.d.Add(shaping.Downstream{Name: sd.Name, Rate: sd.Rate, MaxWait: sd.MaxWait,
			Workers: sd.Workers, Handler: h, Adaptive: sd.Adaptive, Concurrency: sd.Concurrency, Fairness: sd.Fairness,
			Breaker: sd.Breaker, Quotas: sd.Quotas, ShapingMode: sd.ShapingMode}); err != nil {
			t.Fatal(err)
		}
	}
	if b.p, err = app.NewProducer(rdb, cfg, b.reg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.p.Close() })
	b.page = statuspage.New(statuspage.Options{Gatherer: b.reg, Dispatcher: b.d, Plan: pl, Now: o.now,
		Interval: 100 * time.Millisecond, Logger: quiet})
	srv := server.New(server.Options{Addr: "127.0.0.1:0", Registry: b.reg, Token: o.token, MetricsKeys: o.metricsKeys, Logger: quiet})
	b.page.Mount(srv)
	addr, err := srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	b.url = "http://" + addr
	return b
}

func (b *bundle) start(t *testing.T) {
	t.Helper()
	if err := b.d.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { b.page.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		b.d.Shutdown(context.Background())
	})
}

func (b *bundle) snapshot(t *testing.T) statuspage.Snapshot {
	t.Helper()
	resp, err := http.Get(b.url + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /status.json: %d %s, want 200 application/json", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var s statuspage.Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func get(t *testing.T, url string) (string, http.Header) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	return string(body), resp.Header
}

var waitFor = itestutil.WaitFor

func ds(s statuspage.Snapshot, name string) statuspage.DownstreamSnapshot {
	for _, d := range s.Downstreams {
		if d.Name == name {
			return d
		}
	}
	return statuspage.DownstreamSnapshot{}
}

func lim(s statuspage.Snapshot, downstream, name string) (statuspage.LimiterSnapshot, bool) {
	for _, l := range s.Limiters {
		if l.Downstream == downstream && l.Name == name {
			return l, true
		}
	}
	return statuspage.LimiterSnapshot{}, false
}

const flowYAML = `
downstreams:
  - name: api
    rate: 20/s
    workers: 25
    handler: {type: http, url: "https://user@example.invalid/hook?token=HANDLER-SECRET", headers: {Authorization: "Bearer HEADER-SECRET"}}
    admission:
      on_reject: defer
      limiters:
        - {name: per-tenant, algorithm: token_bucket, key: tenant, rate: 1/m, burst: 10}
  - name: slow
    rate: 2/s
    adaptive: {floor: 1/s}
    handler: {type: log}
`

// Tasks flow through admission and the dispatcher; the JSON's figures are
// the registry's, and the achieved rate is the configured one.
func TestStatusJSONWhileTasksFlow(t *testing.T) {
	t.Parallel()
	var handled atomic.Int64
	b := setup(t, setupOpts{yaml: flowYAML, handler: func(ctx context.Context, tk *shaping.Task) error {
		handled.Add(1)
		return nil
	}})
	ctx := context.Background()
	// 10 allowed by the burst; 5 more deferred a minute (they stay scheduled).
	for i := 0; i < 15; i++ {
		if _, err := b.p.Enqueue(ctx, queue.Task{Downstream: "api", Key: "tenant-a", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// And 50 without a key limit reached: another tenant each.
	for i := 0; i < 50; i++ {
		if _, err := b.p.Enqueue(ctx, queue.Task{Downstream: "api", Key: fmt.Sprintf("t%d", i), Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	b.start(t)
	waitFor(t, 20*time.Second, "60 releases", func() bool { return handled.Load() >= 60 })
	// The backlog gauge is what cmd/shaper keeps fresh from the Inspector.
	b.m.Backlog.WithLabelValues("api", "scheduled").Set(5)
	b.m.Backlog.WithLabelValues("api", "pending").Set(0)

	before := testutil.ToFloat64(b.m.Releases.WithLabelValues("api"))
	s := b.snapshot(t)
	after := testutil.ToFloat64(b.m.Releases.WithLabelValues("api"))
	api := ds(s, "api")
	if api.ReleasesTotal < before || api.ReleasesTotal > after {
		t.Errorf("releases_total %v, want between %v and %v (the registry before and after)", api.ReleasesTotal, before, after)
	}
	if api.ConfiguredRate != "20/s" || api.RatePerSecond != 20 {
		t.Errorf("configured %q in force %v, want 20/s and 20", api.ConfiguredRate, api.RatePerSecond)
	}
	// 60 releases at 20/s span ~3s; the window started before the
	// dispatcher did, so the achieved rate is below 20/s but near it.
	if api.AchievedPerSecond <= 0 || api.AchievedPerSecond > 20*1.05 {
		t.Errorf("achieved %.2f/s, want in (0, 21]", api.AchievedPerSecond)
	}
	if n := len(api.PerSecond); n == 0 {
		t.Error("per_second is empty, want samples for the sparkline")
	}
	if api.Backlog["scheduled"] != 5 || api.Backlog["pending"] != 0 {
		t.Errorf("backlog %v, want scheduled 5 and pending 0 (the gauge)", api.Backlog)
	}
	if _, ok := api.Backlog["retry"]; ok {
		t.Errorf("backlog has retry %v, want it absent (the gauge has no such series)", api.Backlog["retry"])
	}
	if api.Lateness.Count < 60 || api.Lateness.P50Seconds == nil || api.Lateness.P99Seconds == nil || api.Lateness.MeanSeconds == nil {
		t.Errorf("lateness %+v, want count >= 60 with p50, p99 and mean", api.Lateness)
	} else if *api.Lateness.P50Seconds > *api.Lateness.P99Seconds || *api.Lateness.P99Seconds > 1 {
		t.Errorf("lateness p50 %v p99 %v, want p50 <= p99 <= 1s (the top bucket)", *api.Lateness.P50Seconds, *api.Lateness.P99Seconds)
	}
	if got, want := api.EnqueuedTotal, testutil.ToFloat64(b.m.Enqueued.WithLabelValues("api")); got != want || got != 65 {
		t.Errorf("enqueued_total %v, registry %v, want both 65", got, want)
	}
	if api.DeferralsTotal != 5 {
		t.Errorf("deferrals_total %v, want 5", api.DeferralsTotal)
	}
	if api.Outcomes["success"] < 60 {
		t.Errorf("outcomes %v, want success >= 60", api.Outcomes)
	}
	checkLimiterAndScripts(t, b, s)

	// The view carries the same figures as text.
	if got := s.View.Cells[statuspage.DownstreamKey("api", "releases")]; got != fmt.Sprint(api.ReleasesTotal) {
		t.Errorf("view releases %q, want %v", got, api.ReleasesTotal)
	}
	if got := s.View.Cells[statuspage.LimiterKey("api", "per-tenant", "deferred")]; got != "5" {
		t.Errorf("view per-tenant deferred %q, want 5", got)
	}
	if sp := s.View.Sparks["api"]; len(strings.Fields(sp.Points)) != len(api.PerSecond) {
		t.Errorf("sparkline has %d points, want one per sample (%d)", len(strings.Fields(sp.Points)), len(api.PerSecond))
	}

	// No secret of the config reaches the page or its JSON.
	raw, _ := get(t, b.url+"/status.json")
	page, _ := get(t, b.url+"/")
	for _, secret := range []string{"HANDLER-SECRET", "HEADER-SECRET", "example.invalid", "redis://", b.cfg.Redis.Prefix} {
		if strings.Contains(raw, secret) || strings.Contains(page, secret) {
			t.Errorf("%q appears on the status page or its JSON", secret)
		}
	}
}

// checkLimiterAndScripts asserts TestStatusJSONWhileTasksFlow's limiter,
// adaptive rate and script figures.
func checkLimiterAndScripts(t *testing.T, b *bundle, s statuspage.Snapshot) {
	t.Helper()
	l, ok := lim(s, "api", "per-tenant")
	if !ok {
		t.Fatalf("limiters %+v, want api/per-tenant", s.Limiters)
	}
	if l.Algorithm != "token_bucket" || l.Rate != "1/m" || l.Key != "tenant" {
		t.Errorf("limiter %+v, want token_bucket 1/m tenant", l)
	}
	for outcome, want := range map[string]float64{"allowed": 60, "deferred": 5, "rejected": 0, "error": 0} {
		reg := testutil.ToFloat64(b.m.Decisions.WithLabelValues("api", "per-tenant", outcome))
		if l.Decisions[outcome] != want || reg != want {
			t.Errorf("decisions[%s] = %v, registry %v, want %v", outcome, l.Decisions[outcome], reg, want)
		}
	}
	slow := ds(s, "slow")
	if slow.Adaptive == nil || slow.Adaptive.Floor != "1/s" || slow.Adaptive.Ceiling != "2/s" {
		t.Errorf("slow adaptive %+v, want floor 1/s ceiling 2/s", slow.Adaptive)
	}
	var shaping *statuspage.ScriptSnapshot
	for i := range s.Scripts {
		if s.Scripts[i].Script == "shaping" {
			shaping = &s.Scripts[i]
		}
	}
	// A lane reserves several slots per call (and stocks slots when the
	// bucket has room), so 60 releases take between one call and about one
	// per release (plus the start-up clock samples), never one per waiting
	// worker per interval.
	if shaping == nil || shaping.CallsTotal < 1 || shaping.CallsTotal > 60+20 || shaping.P99Seconds == nil {
		t.Errorf("scripts %+v, want shaping with 1 to 80 calls for 60 releases and a p99", s.Scripts)
	}
}

// Pause and rate override made through Redis (shaper ctl) show on the
// page: paused from the dispatcher, the override from the sampler.
func TestStatusShowsPauseAndOverride(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: "downstreams:\n  - {name: api, rate: 10/s, handler: {type: log}}\n"})
	b.start(t)
	ctx := context.Background()
	if err := b.d.Control().Pause(ctx, "api"); err != nil {
		t.Fatal(err)
	}
	if err := b.d.Control().SetRate(ctx, "api", limiters.PerSecond(4)); err != nil {
		t.Fatal(err)
	}
	var s statuspage.Snapshot
	waitFor(t, 10*time.Second, "paused and the override on the page", func() bool {
		s = b.snapshot(t)
		api := ds(s, "api")
		return api.Paused && api.OverrideRate == "4/s" && api.RatePerSecond == 4
	})
	if got := s.View.Cells[statuspage.DownstreamKey("api", "state")]; got != "paused" {
		t.Errorf("state cell %q, want paused", got)
	}
	if got := s.View.Cells[statuspage.DownstreamKey("api", "in_force")]; got != "4.00/s" {
		t.Errorf("in force cell %q, want 4.00/s", got)
	}
	// the headline says paused, not a rate as if it ran
	for f, want := range map[string]string{"achieved": "paused", "why_kind": "paused", "drain": "—"} {
		if got := s.View.Cells[statuspage.DownstreamKey("api", f)]; got != want {
			t.Errorf("%s cell %q, want %q", f, got, want)
		}
	}
	if got := ds(s, "api").Why.Reason; got != statuspage.ReasonPaused {
		t.Errorf("why %q in the JSON, want %q", got, statuspage.ReasonPaused)
	}
	if got := testutil.ToFloat64(b.m.Paused.WithLabelValues("api")); got != 1 {
		t.Errorf("shaper_shaping_paused = %v, want 1 like the page", got)
	}
	if err := b.d.Control().Resume(ctx, "api"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "resumed on the page", func() bool { return !ds(b.snapshot(t), "api").Paused })
}

// A downstream with a concurrency cap shows its calls in flight against
// the cap; one without says so.
func TestStatusShowsConcurrencyCap(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	b := setup(t, setupOpts{yaml: "downstreams:\n  - {name: db, rate: 100/s, concurrency: 3, handler: {type: log}}\n  - {name: api, rate: 10/s, handler: {type: log}}\n",
		handler: func(ctx context.Context, _ *shaping.Task) error {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}})
	b.start(t)
	defer close(release)
	for range 5 {
		if _, err := b.p.Enqueue(context.Background(), queue.Task{Downstream: "db"}); err != nil {
			t.Fatal(err)
		}
	}
	var s statuspage.Snapshot
	waitFor(t, 10*time.Second, "3 calls in flight against the cap of 3", func() bool {
		s = b.snapshot(t)
		return s.View.Cells[statuspage.DownstreamKey("db", "leases")] == "3 / 3"
	})
	if got := ds(s, "db").ConcurrencyLimit; got != 3 {
		t.Errorf("concurrency_limit %v, want 3", got)
	}
	if got := s.View.Cells[statuspage.DownstreamKey("api", "leases")]; got != "no cap" {
		t.Errorf("leases cell of a downstream without a cap %q, want \"no cap\"", got)
	}
}

var dataK = regexp.MustCompile(`data-k="([^"]+)"[^>]*>([^<]*)<`)

// The server-rendered page carries every cell of the view with the same
// text, the sparkline, and its assets with a strict content policy.
func TestStatusHTMLRendersTheView(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{yaml: flowYAML})
	for _, path := range []string{"/", "/status"} {
		page, h := get(t, b.url+path)
		if !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
			t.Errorf("GET %s: Content-Type %q, want text/html", path, h.Get("Content-Type"))
		}
		if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q, want default-src 'none' and script-src 'self'", path, csp)
		}
		s := b.snapshot(t)
		found := map[string]string{}
		for _, m := range dataK.FindAllStringSubmatch(page, -1) {
			found[m[1]] = html.UnescapeString(m[2])
		}
		for k, v := range s.View.Cells {
			got, ok := found[k]
			switch {
			case !ok:
				t.Errorf("GET %s: no element for cell %q", path, k)
			case k == "updated" || k == "window":
				// Time moves between the two requests.
			case got != v:
				t.Errorf("GET %s: cell %q = %q, want %q", path, k, got, v)
			}
		}
		for _, name := range []string{"api", "slow"} {
			if !strings.Contains(page, `data-spark="`+name+`"`) {
				t.Errorf("GET %s: no sparkline for %s", path, name)
			}
		}
		if strings.Contains(page, "http://") || strings.Contains(page, "https://") {
			t.Errorf("GET %s: the page refers to another origin", path)
		}
	}
	js, h := get(t, b.url+"/status/status.js")
	if !strings.HasPrefix(h.Get("Content-Type"), "text/javascript") || !strings.Contains(js, `fetch("/status.json"`) {
		t.Errorf("status.js: %q, %d bytes; want JavaScript that polls /status.json", h.Get("Content-Type"), len(js))
	}
	css, h := get(t, b.url+"/status/status.css")
	if !strings.HasPrefix(h.Get("Content-Type"), "text/css") || !strings.Contains(css, ".spark") {
		t.Errorf("status.css: %q, want the page's style", h.Get("Content-Type"))
	}
	resp, err := http.Post(b.url+"/status.json", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /status.json: %d, want 405 (read-only)", resp.StatusCode)
	}
}

// The sampler's arithmetic on a driven clock: the achieved rate over the
// window, one sparkline value per interval, the ring capped at the window,
// and lateness quantiles of the window only.
func TestSamplerWindow(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	b := setup(t, setupOpts{yaml: "downstreams:\n  - {name: api, rate: 10/s, handler: {type: log}}\n",
		now: func() time.Time { return now }})
	// A page with a 1s interval and a 10s window, sampled by hand.
	page := statuspage.New(statuspage.Options{Gatherer: b.reg, Dispatcher: b.d, Plan: b.pl,
		Now: func() time.Time { return now }, Interval: time.Second, Window: 10 * time.Second, Logger: quiet})
	rel := b.m.Releases.WithLabelValues("api")
	late := b.m.Lateness.WithLabelValues("api")
	// 20 old releases 0.5s late: outside the window by the end.
	for i := 0; i < 20; i++ {
		late.Observe(0.5)
	}
	rel.Add(20)
	steps := []struct {
		add        float64
		wantWindow float64
		wantRate   float64
		wantLen    int
	}{
		{10, 1, 30, 1}, // the first interval also carries the 20 old ones
		{10, 2, 20, 2},
		{5, 3, 15, 3},
	}
	for i, st := range steps {
		now = now.Add(time.Second)
		rel.Add(st.add)
		statuspage.Record(page)
		s := page.Snapshot()
		api := ds(s, "api")
		if s.WindowSeconds != st.wantWindow || math.Abs(api.AchievedPerSecond-st.wantRate) > 1e-9 || len(api.PerSecond) != st.wantLen {
			t.Errorf("step %d: got window %v achieved %v len %d, want %v %v %d", i, s.WindowSeconds, api.AchievedPerSecond,
				len(api.PerSecond), st.wantWindow, st.wantRate, st.wantLen)
		}
	}
	// 20 seconds more at 7 per second, each 2ms late: the window holds only them.
	for i := 0; i < 20; i++ {
		now = now.Add(time.Second)
		rel.Add(7)
		for j := 0; j < 7; j++ {
			late.Observe(0.002)
		}
		statuspage.Record(page)
	}
	s := page.Snapshot()
	api := ds(s, "api")
	if s.WindowSeconds != 10 {
		t.Errorf("window %v s, want 10 (capped)", s.WindowSeconds)
	}
	if math.Abs(api.AchievedPerSecond-7) > 1e-9 {
		t.Errorf("achieved %v/s, want 7", api.AchievedPerSecond)
	}
	if len(api.PerSecond) != 10 {
		t.Errorf("%d sparkline values, want 10 (one per interval of the window)", len(api.PerSecond))
	}
	for i, v := range api.PerSecond {
		if math.Abs(v-7) > 1e-9 {
			t.Errorf("per_second[%d] = %v, want 7", i, v)
		}
	}
	if api.Lateness.Count != 70 {
		t.Errorf("lateness count %v, want 70 (the window's releases)", api.Lateness.Count)
	}
	// Every observation is 2ms, in the (1ms, 2ms] bucket: histogram_quantile
	// interpolates inside it.
	if p := api.Lateness.P50Seconds; p == nil || math.Abs(*p-0.0015) > 1e-9 {
		t.Errorf("lateness p50 %v, want 1.5ms (interpolated in the 1-2ms bucket)", deref(p))
	}
	if p := api.Lateness.P99Seconds; p == nil || math.Abs(*p-0.00199) > 1e-9 {
		t.Errorf("lateness p99 %v, want 1.99ms", deref(p))
	}
	if m := api.Lateness.MeanSeconds; m == nil || math.Abs(*m-0.002) > 1e-9 {
		t.Errorf("lateness mean %v, want 2ms", deref(m))
	}
	if api.ReleasesTotal != 20+25+140 {
		t.Errorf("releases_total %v, want %d", api.ReleasesTotal, 20+25+140)
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// While Redis is down the page says so: every card's state and the live
// marker read "Redis unreachable", figures stale since the last good
// read, instead of "running" and "live"; once Redis is back they recover.
func TestStatusShowsRedisUnreachable(t *testing.T) {
	t.Parallel()
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { rdb.Close(); srv.Stop(); srv.Cleanup() })
	b := setup(t, setupOpts{yaml: flowYAML, rdb: rdb})
	b.start(t)
	waitFor(t, 10*time.Second, "a good read of Redis", func() bool {
		s := b.snapshot(t)
		return s.Redis.Reachable && s.Redis.LastOK != nil
	})
	if s := b.snapshot(t); s.View.Cells["live"] != "live" || s.View.Cells[statuspage.DownstreamKey("api", "state")] != "running" {
		t.Fatalf("with Redis up: live %q, state %q; want live and running", s.View.Cells["live"], s.View.Cells[statuspage.DownstreamKey("api", "state")])
	}
	srv.Stop()
	var s statuspage.Snapshot
	waitFor(t, 15*time.Second, "Redis unreachable on the page", func() bool {
		s = b.snapshot(t)
		return !s.Redis.Reachable
	})
	for _, name := range []string{"api", "slow"} {
		if got := s.View.Cells[statuspage.DownstreamKey(name, "state")]; got != "Redis unreachable" {
			t.Errorf("state of %s = %q while Redis is down, want Redis unreachable", name, got)
		}
	}
	since := s.Redis.LastOK.Format("15:04:05") + " UTC"
	if got := s.View.Cells["live"]; got != "Redis unreachable · figures stale since "+since {
		t.Errorf("live cell %q, want Redis unreachable · figures stale since %s", got, since)
	}
	page, _ := get(t, b.url+"/")
	if !strings.Contains(page, `data-k="live">Redis unreachable · figures stale since`) {
		t.Error("the rendered page does not say Redis is unreachable")
	}
	if err := srv.StartAgain(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "Redis reachable again", func() bool {
		s = b.snapshot(t)
		return s.Redis.Reachable && s.View.Cells[statuspage.DownstreamKey("api", "state")] == "running"
	})
}
