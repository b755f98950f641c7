package main_test

import (
	"bytes"
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/testsink"
	"github.com/shaper-io/shaper/internal/testutil"
)

// chromiumPath is Debian's chromium; scripts/install-chromium.sh installs it.
const chromiumPath = "/usr/bin/chromium"

// chromium runs headless Chromium on url with extra flags (--dump-dom or
// --screenshot=…) and returns its standard output.
func chromium(t *testing.T, url string, extra ...string) string {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("%s is missing: the status page's browser test needs Debian's chromium; install it with scripts/install-chromium.sh", chromiumPath)
	}
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--window-size=1280,1000",
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
	domCell  = regexp.MustCompile(`data-k="([^"]+)"[^>]*>([^<]*)<`)
	domPolls = regexp.MustCompile(`data-polls="(\d+)"`)
	domSpark = regexp.MustCompile(`data-spark="api"[^>]*>[\s\S]*?<polyline points="([^"]*)"`)
)

// The status page in a real browser while tasks flow: the script polls,
// and every figure it shows lies between two scrapes of /metrics taken
// before and after the browser ran.
func TestStatusPageInChromium(t *testing.T) {
	// Not parallel: the achieved-rate claim needs the CPU.
	sink := testsink.New()
	defer sink.Close()
	prefix := redistest.Prefix(t)
	enqueue(t, prefix, 300) // 15 s of work at 20/s
	cfg := daemonYAML(t, prefix, fmt.Sprintf(`  - name: api
    rate: 20/s
    workers: 25
    handler: {type: http, url: %q, timeout: 5s}
    admission:
      on_reject: defer
      limiters:
        - {name: per-tenant, algorithm: token_bucket, key: tenant, rate: 1/m, burst: 10}
  - name: idle
    rate: 5/s
    adaptive: {floor: 1/s}
    handler: {type: log}
`, sink.URL()))
	p := startShaper(t, cfg)
	base := "http://" + httpAddr(t, p)
	// Through this process's enqueue API, so that its admission counts:
	// 10 allowed by the burst, 20 deferred (they wait, scheduled).
	for i := 0; i < 30; i++ {
		resp, err := http.Post(base+"/v1/downstreams/api/tasks", "application/json",
			strings.NewReader(fmt.Sprintf(`{"payload":{"http":%d},"key":"tenant-a"}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("enqueue %d: HTTP %d, want 202", i, resp.StatusCode)
		}
	}
	waitFor(t, 30*time.Second, "100 deliveries", func() bool { return sink.Count() >= 100 })
	// The backlog gauge is refreshed every 5s; wait until it has seen the
	// 20 deferred tasks.
	waitFor(t, 10*time.Second, "the backlog gauge", func() bool {
		v, _ := scrape(t, base).value("shaper_queue_tasks", "downstream=api", "state=scheduled")
		return v == 20
	})

	m1 := scrape(t, base)
	dom := chromium(t, base+"/", "--dump-dom")
	m2 := scrape(t, base)

	pm := domPolls.FindStringSubmatch(dom)
	if pm == nil {
		t.Fatalf("no data-polls in the DOM:\n%s", tail(dom, 3000))
	}
	if n, _ := strconv.Atoi(pm[1]); n < 1 {
		t.Errorf("data-polls = %d, want >= 1: the page's script did not update it", n)
	}
	cells := map[string]string{}
	for _, m := range domCell.FindAllStringSubmatch(dom, -1) {
		cells[m[1]] = strings.TrimSpace(html.UnescapeString(m[2]))
	}
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
		got := num(k)
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
		"ds/api/in_force": "20.00/s", "ds/api/override": "none"} {
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
	sm := domSpark.FindStringSubmatch(dom)
	if sm == nil || len(strings.Fields(sm[1])) < 3 {
		t.Errorf("sparkline of api: %q, want at least 3 points", sm)
	}

	// A screenshot: a real PNG of a laid-out page.
	shot := filepath.Join(t.TempDir(), "status.png")
	chromium(t, base+"/", "--screenshot="+shot, "--hide-scrollbars")
	png, err := os.ReadFile(shot)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 20_000 {
		t.Fatalf("screenshot: %d bytes, err %v; want a PNG of the page", len(png), err)
	}
	if os.Getenv("SHAPER_UPDATE_SCREENSHOT") == "1" {
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "status-page.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("page: releases %s, achieved %s, lateness p50 %s p99 %s", cells["ds/api/releases"], cells["ds/api/achieved"],
		cells["ds/api/late_p50"], cells["ds/api/late_p99"])
	keys := make([]string, 0, len(cells))
	for k := range cells {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) < 40 {
		t.Errorf("%d figures on the page, want every downstream's and limiter's (>= 40): %v", len(keys), keys)
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
