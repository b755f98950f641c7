package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/statuspage"
	"github.com/shaper-io/shaper/internal/testsink"
	"github.com/shaper-io/shaper/internal/testutil"
)

// chromiumPath is Debian's chromium; scripts/install-chromium.sh installs it.
const chromiumPath = "/usr/bin/chromium"

// chromium runs headless Chromium on url in a 1280 px wide window; see
// chromiumAt.
func chromium(t *testing.T, url string, extra ...string) string {
	t.Helper()
	return chromiumAt(t, 1280, url, extra...)
}

// chromiumAt runs headless Chromium on url in a window width px wide with
// extra flags (--dump-dom or --screenshot=…) and returns its standard
// output.
func chromiumAt(t *testing.T, width int, url string, extra ...string) string {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("%s is missing: the status page's browser test needs Debian's chromium; install it with scripts/install-chromium.sh", chromiumPath)
	}
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), fmt.Sprintf("--window-size=%d,1000", width),
		// Let the page's script run for 3 s of virtual time (its polls
		// are real requests; virtual time waits for them).
		"--virtual-time-budget=3000"}, extra...)
	args = append(args, url)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromiumPath, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(extra, " "), err, tail(stderr.String(), 2000))
	}
	return stdout.String()
}

// metricsText is one scrape of /metrics.
type metricsText string

func scrape(t *testing.T, base string) metricsText {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return metricsText(b)
}

// value is the sample of name whose labels include every pair in labels
// ("k=v" strings), and whether there is one.
func (m metricsText) value(name string, labels ...string) (float64, bool) {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? (\S+)$`)
	for _, s := range re.FindAllStringSubmatch(string(m), -1) {
		ok := true
		for _, l := range labels {
			k, v, _ := strings.Cut(l, "=")
			if !strings.Contains(s[1], k+`="`+v+`"`) {
				ok = false
			}
		}
		if ok {
			f, err := strconv.ParseFloat(s[2], 64)
			return f, err == nil
		}
	}
	return 0, false
}

var (
	domCell   = regexp.MustCompile(`data-k="([^"]+)"[^>]*>([^<]*)<`)
	domPolls  = regexp.MustCompile(`data-polls="(\d+)"`)
	domSpark  = regexp.MustCompile(`data-spark="api"[^>]*>[\s\S]*?<polyline points="([^"]*)"`)
	domLayout = regexp.MustCompile(`<pre id="layout-check">([^<]*)</pre>`)
)

// layoutCheckJS runs in the page (the test's proxy adds it): after each
// poll of the page's script it measures every rendered element of every
// card, its details folded and then unfolded, and writes what it found
// into <pre id="layout-check"> as JSON. An element is bad when its box
// leaves its card's, or its content is wider than its box (clipped or
// running out); the page is bad when it scrolls sideways.
const layoutCheckJS = `(function () {
  "use strict";
  var out = document.createElement("pre");
  out.id = "layout-check";
  document.body.appendChild(out);
  var res = {width: window.innerWidth, polls: 0, checks: 0, cards: 0, elements: 0, bad: []};
  function name(el) {
    var k = el.getAttribute("data-k") || el.getAttribute("data-row") || el.id;
    return el.tagName.toLowerCase() + (k ? "[" + k + "]" : "");
  }
  function check(phase) {
    res.checks++;
    var doc = document.documentElement;
    if (doc.scrollWidth > window.innerWidth) res.bad.push(phase + ": the page scrolls sideways: " + doc.scrollWidth + " > " + window.innerWidth);
    var cards = document.querySelectorAll(".card");
    res.cards = cards.length;
    cards.forEach(function (card) {
      var c = card.getBoundingClientRect();
      [card].concat(Array.prototype.slice.call(card.querySelectorAll("*"))).forEach(function (el) {
        if (el.getClientRects().length === 0) return; // not rendered
        res.elements++;
        var r = el.getBoundingClientRect();
        if (r.left < c.left - 0.5 || r.right > c.right + 0.5) {
          res.bad.push(phase + ": " + name(el) + " [" + Math.round(r.left) + "," + Math.round(r.right) + "] leaves its card [" + Math.round(c.left) + "," + Math.round(c.right) + "]");
        }
        if (!(el instanceof SVGElement) && el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1) {
          res.bad.push(phase + ": " + name(el) + " content " + el.scrollWidth + " px wide in " + el.clientWidth + " px");
        }
      });
    });
  }
  setInterval(function () {
    var polls = parseInt(document.body.getAttribute("data-polls"), 10) || 0;
    if (polls === res.polls) return;
    res.polls = polls;
    check("poll " + polls + " folded");
    document.querySelectorAll(".card details").forEach(function (d) { d.open = true; });
    check("poll " + polls + " unfolded");
    document.querySelectorAll(".card details").forEach(function (d) { d.open = false; });
    res.bad = res.bad.slice(0, 30);
    out.textContent = JSON.stringify(res);
  }, 50);
})();`

// layoutProxy serves shaper's page at base through a proxy that adds
// layoutCheckJS to the HTML (served from the proxy's origin, which the
// page's content policy allows as 'self') and passes everything else on.
func layoutProxy(t *testing.T, base string) string {
	t.Helper()
	up, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(up)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/layout-check.js":
			w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
			io.WriteString(w, layoutCheckJS)
		case "/":
			resp, err := http.Get(base + r.URL.RequestURI())
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			for k, vs := range resp.Header {
				if k != "Content-Length" {
					w.Header()[k] = vs
				}
			}
			w.WriteHeader(resp.StatusCode)
			w.Write(bytes.Replace(b, []byte("</head>"), []byte(`<script src="/layout-check.js" defer></script></head>`), 1))
		default:
			rp.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// layoutResult is what layoutCheckJS wrote.
type layoutResult struct {
	Width    int      `json:"width"`
	Polls    int      `json:"polls"`
	Checks   int      `json:"checks"`
	Cards    int      `json:"cards"`
	Elements int      `json:"elements"`
	Bad      []string `json:"bad"`
}

// checkLayout asserts that the page dumped at width had its cards
// measured, folded and unfolded, and nothing leave its card.
func checkLayout(t *testing.T, dom string, width, cards int) {
	t.Helper()
	m := domLayout.FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("at %d px: no layout check in the DOM (did the page poll?):\n%s", width, tail(dom, 2000))
	}
	var res layoutResult
	if err := json.Unmarshal([]byte(html.UnescapeString(m[1])), &res); err != nil {
		t.Fatalf("at %d px: layout check %q: %v", width, m[1], err)
	}
	t.Logf("at %d px: %d checks over %d cards, %d elements measured", width, res.Checks, res.Cards, res.Elements)
	if res.Width < width-20 || res.Width > width {
		t.Errorf("at %d px: the window's inner width is %d, want about %d", width, res.Width, width)
	}
	if res.Checks < 2 || res.Cards != cards || res.Elements < 100*cards {
		t.Errorf("at %d px: %d checks of %d cards and %d elements, want >= 2 checks of %d cards, >= %d elements", width,
			res.Checks, res.Cards, res.Elements, cards, 100*cards)
	}
	for _, b := range res.Bad {
		t.Errorf("at %d px: %s", width, b)
	}
}

// postTasks enqueues n tasks through shaper's HTTP API, the i-th with
// key(i).
func postTasks(t *testing.T, base, downstream string, n int, key func(i int) string) {
	t.Helper()
	for i := 0; i < n; i++ {
		resp, err := http.Post(base+"/v1/downstreams/"+downstream+"/tasks", "application/json",
			strings.NewReader(fmt.Sprintf(`{"payload":{"http":%d},"key":%q}`, i, key(i))))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("enqueue %d on %s: HTTP %d, want 202", i, downstream, resp.StatusCode)
		}
	}
}

// statusJSON is one GET /status.json.
func statusJSON(t *testing.T, base string) statuspage.Snapshot {
	t.Helper()
	resp, err := http.Get(base + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s statuspage.Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// browserConfig: api drains a backlog at 20/s through an admission
// limiter; batch has released some tasks and is then paused with a
// backlog; tenants shares 4/s among twelve keys with long names (long
// lines to wrap); idle is adaptive and has no work.
func browserConfig(t *testing.T, prefix, sinkURL string) string {
	return daemonYAML(t, prefix, fmt.Sprintf(`  - name: api
    rate: 20/s
    workers: 25
    handler: {type: http, url: %q, timeout: 5s}
    admission:
      on_reject: defer
      limiters:
        - {name: per-tenant, algorithm: token_bucket, key: tenant, rate: 1/m, burst: 10}
  - {name: batch, rate: 5/s, handler: {type: log}}
  - {name: tenants, rate: 4/s, fairness: {key: tenant}, handler: {type: log}}
  - name: idle
    rate: 5/s
    adaptive: {floor: 1/s}
    handler: {type: log}
`, sinkURL))
}

// The status page in a real browser while tasks flow: the script polls;
// every figure it shows lies between two scrapes of /metrics taken before
// and after the browser ran; at 800 and at 1920 px no element of a card
// leaves its card, folded or unfolded; and the why-waiting line names the
// rate for the downstream that drains a backlog and "paused" for the
// paused one, whose headline says paused instead of its rate before.
func TestStatusPageInChromium(t *testing.T) {
	// Not parallel: the achieved-rate claim needs the CPU.
	sink := testsink.New()
	defer sink.Close()
	prefix := redistest.Prefix(t)
	enqueue(t, prefix, 600) // 30 s of work at 20/s: api is rate-bound while the browser runs
	p := startShaper(t, browserConfig(t, prefix, sink.URL()))
	base := "http://" + httpAddr(t, p)
	// batch releases a few, then is paused with the rest waiting
	postTasks(t, base, "batch", 40, func(int) string { return "" })
	waitFor(t, 20*time.Second, "batch's first releases", func() bool {
		v, _ := scrape(t, base).value("shaper_shaping_releases_total", "downstream=batch")
		return v >= 3
	})
	if resp, err := http.Post(base+"/v1/downstreams/batch/pause", "application/json", nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("pause batch: %v %v", resp, err)
	}
	postTasks(t, base, "tenants", 60, func(i int) string { return fmt.Sprintf("tenant-with-a-rather-long-name-%02d", i%12) })
	// Through this process's enqueue API, so that its admission counts:
	// 10 allowed by the burst, 20 deferred (they wait, scheduled).
	postTasks(t, base, "api", 30, func(int) string { return "tenant-a" })
	waitFor(t, 30*time.Second, "100 deliveries", func() bool { return sink.Count() >= 100 })
	// The backlog gauge is refreshed every 5s; wait until it has seen the
	// 20 deferred tasks, and the page batch paused.
	waitFor(t, 10*time.Second, "the backlog gauge", func() bool {
		v, _ := scrape(t, base).value("shaper_queue_tasks", "downstream=api", "state=scheduled")
		return v == 20
	})
	waitFor(t, 10*time.Second, "batch paused on the page", func() bool {
		for _, d := range statusJSON(t, base).Downstreams {
			if d.Name == "batch" {
				return d.Paused
			}
		}
		return false
	})
	proxy := layoutProxy(t, base)

	m1 := scrape(t, base)
	dom := chromiumAt(t, 1920, proxy+"/", "--dump-dom")
	m2 := scrape(t, base)
	checkFigures(t, dom, m1, m2)
	checkLayout(t, dom, 1920, 4)
	checkWhy(t, 1920, domCells(dom))

	dom = chromiumAt(t, 800, proxy+"/", "--dump-dom")
	checkLayout(t, dom, 800, 4)
	checkWhy(t, 800, domCells(dom))

	// A screenshot: a real PNG of a laid-out page.
	shot := filepath.Join(t.TempDir(), "status.png")
	chromium(t, base+"/", "--screenshot="+shot, "--hide-scrollbars")
	png, err := os.ReadFile(shot)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 20_000 {
		t.Fatalf("screenshot: %d bytes, err %v; want a PNG of the page", len(png), err)
	}
}

// checkWhy asserts the why-waiting lines and the paused headline.
func checkWhy(t *testing.T, width int, cells map[string]string) {
	t.Helper()
	for k, want := range map[string]string{
		"ds/api/why_kind":   "rate",
		"ds/api/why":        "20.00/s in force · the backlog drains at the rate",
		"ds/batch/why_kind": "paused",
		"ds/batch/why":      "nothing is released until it is resumed (shaper ctl resume batch)",
		"ds/batch/achieved": "paused",
		"ds/batch/drain":    "—",
		"ds/idle/why_kind":  "nothing waiting",
	} {
		if cells[k] != want {
			t.Errorf("at %d px: %s = %q, want %q", width, k, cells[k], want)
		}
	}
	if got := cells["ds/batch/achieved_of"]; !strings.HasSuffix(got, "before the pause") || !strings.HasPrefix(got, "0.00/s now · ") {
		t.Errorf("at %d px: batch's achieved label %q, want 0.00/s now and the window's rate before the pause", width, got)
	}
	if got := cells["ds/api/drain"]; !strings.HasPrefix(got, "≈ ") {
		t.Errorf("at %d px: api's drain time %q, want a prediction", width, got)
	}
}

// checkBetween asserts that the page's figure k, got, lies between the
// values of metric in the scrapes m1 and m2.
func checkBetween(t *testing.T, k string, got float64, m1, m2 metricsText, metric string, labels ...string) {
	t.Helper()
	lo, ok1 := m1.value(metric, labels...)
	hi, ok2 := m2.value(metric, labels...)
	// A counter's series appears at its first increment: absent is 0.
	if strings.HasSuffix(metric, "_total") {
		ok1, ok2 = true, true
	}
	if !ok1 || !ok2 {
		t.Errorf("%s%v missing from /metrics", metric, labels)
		return
	}
	if lo > hi {
		lo, hi = hi, lo
	}
	if got < lo || got > hi {
		t.Errorf("page %s = %v, want between %v and %v (%s%v before and after)", k, got, lo, hi, metric, labels)
	}
}

// checkFigures asserts that the figures of a page dumped between the
// scrapes m1 and m2 lie between them.
func checkFigures(t *testing.T, dom string, m1, m2 metricsText) {
	t.Helper()
	pm := domPolls.FindStringSubmatch(dom)
	if pm == nil {
		t.Fatalf("no data-polls in the DOM:\n%s", tail(dom, 3000))
	}
	if n, _ := strconv.Atoi(pm[1]); n < 1 {
		t.Errorf("data-polls = %d, want >= 1: the page's script did not update it", n)
	}
	cells := domCells(dom)
	num := func(k string) float64 {
		t.Helper()
		s, ok := cells[k]
		if !ok {
			t.Fatalf("no element %q on the page", k)
		}
		f, err := strconv.ParseFloat(strings.TrimSuffix(s, "/s"), 64)
		if err != nil {
			t.Fatalf("element %q = %q, want a number", k, s)
		}
		return f
	}
	between := func(k, metric string, labels ...string) {
		t.Helper()
		checkBetween(t, k, num(k), m1, m2, metric, labels...)
	}
	between("ds/api/releases", "shaper_shaping_releases_total", "downstream=api")
	between("ds/api/in_force", "shaper_shaping_rate_per_second", "downstream=api")
	between("ds/idle/in_force", "shaper_shaping_rate_per_second", "downstream=idle")
	between("ds/api/enqueued", "shaper_queue_enqueued_total", "downstream=api")
	between("ds/api/deferrals", "shaper_admission_deferrals_total", "downstream=api")
	between("ds/api/backlog_pending", "shaper_queue_tasks", "downstream=api", "state=pending")
	between("ds/api/backlog_scheduled", "shaper_queue_tasks", "downstream=api", "state=scheduled")
	between("ds/api/bucket_full", "shaper_shaping_bucket_full_total", "downstream=api")
	between("ds/api/late_skips", "shaper_shaping_late_skips_total", "downstream=api")
	between("lim/api/per-tenant/allowed", "shaper_admission_decisions_total", "downstream=api", "limiter=per-tenant", "outcome=allowed")
	between("lim/api/per-tenant/deferred", "shaper_admission_decisions_total", "downstream=api", "limiter=per-tenant", "outcome=deferred")
	if got := num("lim/api/per-tenant/allowed"); got != 10 {
		t.Errorf("per-tenant allowed = %v on the page, want 10 (the burst)", got)
	}
	if got := num("lim/api/per-tenant/deferred"); got != 20 {
		t.Errorf("per-tenant deferred = %v on the page, want 20", got)
	}
	if got := num("ds/api/pushbacks"); got != 0 {
		t.Errorf("pushbacks = %v, want 0 (the sink never throttled)", got)
	}
	for k, want := range map[string]string{"ds/api/configured": "20/s", "ds/api/state": "running", "ds/idle/state": "adaptive",
		"ds/api/in_force": "20.00/s", "ds/api/override": "none", "ds/batch/state": "paused"} {
		if cells[k] != want {
			t.Errorf("page %s = %q, want %q", k, cells[k], want)
		}
	}
	// The backlog drains at 20/s from the first second on: the achieved rate
	// over the process's life so far is near it, never above it.
	if got := num("ds/api/achieved"); got < 14 || got > 20*1.05 {
		t.Errorf("achieved %v/s on the page, want 14..21 (rate 20/s)", got)
	}
	for _, k := range []string{"ds/api/late_p50", "ds/api/late_p99"} {
		if !strings.HasSuffix(cells[k], "ms") && !strings.HasSuffix(cells[k], "µs") {
			t.Errorf("page %s = %q, want a duration in ms or µs", k, cells[k])
		}
	}
	if sm := domSpark.FindStringSubmatch(dom); sm == nil || len(strings.Fields(sm[1])) < 3 {
		t.Errorf("sparkline of api: %q, want at least 3 points", sm)
	}
	t.Logf("page: releases %s, achieved %s, lateness p50 %s p99 %s; api: %s: %s", cells["ds/api/releases"], cells["ds/api/achieved"],
		cells["ds/api/late_p50"], cells["ds/api/late_p99"], cells["ds/api/why_kind"], cells["ds/api/why"])
	if len(cells) < 40 {
		t.Errorf("%d figures on the page, want every downstream's and limiter's (>= 40): %v", len(cells), cells)
	}
}

// domCells is the text of every data-k element of a dumped DOM.
func domCells(dom string) map[string]string {
	cells := map[string]string{}
	for _, m := range domCell.FindAllStringSubmatch(dom, -1) {
		cells[m[1]] = strings.TrimSpace(html.UnescapeString(m[2]))
	}
	return cells
}

var (
	quickStartURL = regexp.MustCompile(`status page: (http://\S+)/ `)
	domLive       = regexp.MustCompile(`<span id="live" class="([^"]*)" data-k="live">([^<]*)<`)
	domDigits     = regexp.MustCompile(`^[0-9]+$`)
)

// The quick start's page in a browser, as a newcomer first sees it: the
// backlog cells hold numbers, the admission row names the demo limiter,
// and the full-bucket count reads "waits for a slot", with a tooltip.
func TestQuickStartStatusPageInChromium(t *testing.T) {
	cmd := exec.Command(shaperBin, "-listen", "127.0.0.1:0")
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var base string
	waitFor(t, 15*time.Second, "the status page address", func() bool {
		if m := quickStartURL.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
		}
		return base != ""
	})
	// The backlog gauge is refreshed every 5s from start; give it that
	// long, and let the page show what it shows if it never comes.
	eventually(10*time.Second, func() bool {
		_, ok := scrape(t, base).value("shaper_queue_tasks", "downstream=demo", "state=pending")
		return ok
	})
	dom := chromium(t, base+"/", "--dump-dom")
	cells := domCells(dom)
	for _, st := range []string{"pending", "active", "scheduled", "retry", "archived"} {
		if v := cells["ds/demo/backlog_"+st]; !domDigits.MatchString(v) {
			t.Errorf("backlog %s on the quick start's page = %q, want a number", st, v)
		}
	}
	if !strings.Contains(dom, "<td>demo-tenant</td><td>token_bucket</td><td>tenant</td><td>4/s (burst 8)</td>") {
		t.Errorf("the admission row does not name the demo limiter's algorithm, key and rate:\n%s", tail(dom, 3000))
	}
	if !regexp.MustCompile(`<dt title="[^"]*not an error[^"]*">waits for a slot</dt>`).MatchString(dom) || strings.Contains(dom, "bucket full</dt>") {
		t.Error(`the full-bucket count is not shown as "waits for a slot" with a tooltip`)
	}
}

// While Redis is down, the browser shows it: the live marker turns into
// "Redis unreachable · figures stale since T" and every card's state says
// so, instead of "live" and "running" over stale numbers.
func TestStatusPageRedisDownInChromium(t *testing.T) {
	srv, _ := ownRedis(t)
	p := startShaper(t, fmt.Sprintf(`
redis: {url: "redis://%s", prefix: %q}
http: {listen: "127.0.0.1:0"}
shutdown_timeout: 2s
downstreams:
  - {name: api, rate: 5/s, handler: {type: log}}
`, srv.Addr, redistest.Prefix(t)))
	base := "http://" + httpAddr(t, p)
	json := func() string {
		resp, err := http.Get(base + "/status.json")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	waitFor(t, 10*time.Second, "a page with no Redis warning", func() bool { return !strings.Contains(json(), `"warning":"redis`) })
	srv.Stop()
	// The sampler's warning (there before this page knew of Redis being
	// down) marks its first failed read.
	waitFor(t, 15*time.Second, "the sampler's Redis warning", func() bool { return strings.Contains(json(), `"warning":"redis unreachable`) })
	dom := chromium(t, base+"/", "--dump-dom")
	m := domLive.FindStringSubmatch(dom)
	if m == nil || !strings.Contains(m[1], "stale") || !strings.HasPrefix(html.UnescapeString(m[2]), "Redis unreachable · figures stale since ") {
		t.Errorf("live marker %q, want class stale and Redis unreachable · figures stale since …", m)
	}
	if got := domCells(dom)["ds/api/state"]; got != "Redis unreachable" {
		t.Errorf("state of api = %q while Redis is down, want Redis unreachable", got)
	}
}

var eventually = testutil.Eventually
