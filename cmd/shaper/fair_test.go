package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/plan"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/testsink"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

func fairConfig(t *testing.T, prefix, sinkURL, fairness string) string {
	return daemonYAML(t, prefix, fmt.Sprintf(`  - name: api
    rate: 50/s
    fairness: %s
    handler: {type: http, url: %q, timeout: 5s}
`, fairness, sinkURL))
}

// fairProducer is the producer the daemon builds from the same config.
func fairProducer(t *testing.T, cfgText string) *queue.Producer {
	t.Helper()
	cfg, err := config.Parse([]byte(cfgText))
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := queue.NewProducer(redistest.Client(t), pl.Producer)
	t.Cleanup(func() { p.Close() })
	return p
}

type tenantTask struct {
	T string `json:"t"`
	N int    `json:"n"`
}

// enqueueTenant enqueues n tasks of tenant and returns when the first was
// enqueued.
func enqueueTenant(t *testing.T, p *queue.Producer, tenant string, n int) (time.Time, []queue.Receipt) {
	t.Helper()
	first, recs := enqueueTogether(t, p, []string{tenant}, n)
	return first[tenant], recs[tenant]
}

// enqueueTogether enqueues n tasks of each tenant, taking turns (one of
// each, then the next), as tenants that arrive at the same moment: each
// receipt then sees the others' tasks enqueued so far, as it would were
// they enqueued in step. It returns when each tenant's first was enqueued
// and its receipts.
func enqueueTogether(t *testing.T, p *queue.Producer, tenants []string, n int) (map[string]time.Time, map[string][]queue.Receipt) {
	t.Helper()
	first, recs := map[string]time.Time{}, map[string][]queue.Receipt{}
	for i := range n {
		for _, tn := range tenants {
			if i == 0 {
				first[tn] = time.Now()
			}
			b, _ := json.Marshal(tenantTask{tn, i})
			rec, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Key: tn, Payload: b})
			if err != nil {
				t.Fatalf("enqueue %s #%d: %v", tn, i, err)
			}
			recs[tn] = append(recs[tn], rec)
		}
	}
	return first, recs
}

// releases are the sink's successful hits by tenant, in arrival order,
// failing on a task delivered twice.
func releases(t *testing.T, sink *testsink.Sink) (map[string][]time.Time, []testsink.Hit) {
	t.Helper()
	out := map[string][]time.Time{}
	seen := map[tenantTask]bool{}
	hits := sink.OK()
	sort.Slice(hits, func(i, j int) bool { return hits[i].At.Before(hits[j].At) })
	for _, h := range hits {
		var tt tenantTask
		if err := json.Unmarshal([]byte(h.Payload), &tt); err != nil {
			t.Fatalf("payload %q: %v", h.Payload, err)
		}
		if seen[tt] {
			t.Errorf("%s #%d delivered twice", tt.T, tt.N)
		}
		seen[tt] = true
		out[tt.T] = append(out[tt.T], h.At)
	}
	return out, hits
}

// Three shaper processes, one downstream at 50/s with fair share: tenant A
// enqueues 3,000 tasks, then B and C 200 each (10 s and more of work at
// their shares, so the 10 s windows below fit). B's first release comes
// within a second of its enqueue, the three share the rate by weight while
// all have work (Jain's index ≥ 0.95 in every 10s window, each share within
// 10% of its weighted share), the rate holds (≤ rate+1 in any second, ≥ 95%
// under backlog: the exact figure is the benchmark's), A gets the whole
// rate back within a second of B and C finishing, the receipts say when
// B's tasks start (checkExpectedStarts), and no task is delivered twice or
// lost. On a failed share check the test logs each second's
// releases by tenant and process.
func TestFairShareThreeProcesses(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fairness string
		weights  map[string]float64
	}{
		{"equal", "{key: tenant}", map[string]float64{"A": 1, "B": 1, "C": 1}},
		{"weighted", "{key: tenant, weights: {A: 2}}", map[string]float64{"A": 2, "B": 1, "C": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) { fairThreeProcesses(t, tc.fairness, tc.weights) })
	}
}

func fairThreeProcesses(t *testing.T, fairness string, weights map[string]float64) {
	sink := testsink.New()
	defer sink.Close()
	prefix := redistest.Prefix(t)
	cfg := fairConfig(t, prefix, sink.URL(), fairness)
	p := fairProducer(t, cfg)
	procs := []*proc{startShaper(t, cfg), startShaper(t, cfg), startShaper(t, cfg)}
	const nA, nB = 3000, 200 // B and C have work for 10s or more at their shares
	enqueueTenant(t, p, "A", nA)
	waitFor(t, 30*time.Second, "A flowing", func() bool { return sink.Count() >= 150 })
	at, recs := enqueueTogether(t, p, []string{"B", "C"}, nB)
	bAt, cAt := at["B"], at["C"]
	waitFor(t, 60*time.Second, "B and C delivered", func() bool {
		r, _ := releases(t, sink)
		return len(r["B"]) >= nB && len(r["C"]) >= nB
	})
	r, _ := releases(t, sink)
	endBC := maxTime(r["B"][nB-1], r["C"][nB-1])
	waitFor(t, 10*time.Second, "A alone for 2s", func() bool { return time.Since(endBC) > 2*time.Second })
	for _, pr := range procs {
		pr.stop(t)
	}
	r, hits := releases(t, sink)

	firstB, firstC := r["B"][0].Sub(bAt), r["C"][0].Sub(cAt)
	t.Logf("first release after enqueue: B %v, C %v", firstB.Round(time.Millisecond), firstC.Round(time.Millisecond))
	if firstB > time.Second || firstC > time.Second {
		t.Errorf("first release of B after %v, of C after %v; want within 1s", firstB, firstC)
	}
	// Shares while all three have work, once the releases already
	// committed when B and C arrived (A's tasks in pending and in slots
	// reserved up to 250ms ahead: fairindex.Lookahead) are out: 0.5s.
	from := maxTime(r["B"][0], r["C"][0]).Add(500 * time.Millisecond)
	to := minTime(r["B"][nB-1], r["C"][nB-1])
	var wsum float64
	for _, w := range weights {
		wsum += w
	}
	total := testsink.Between(r["A"], from, to) + testsink.Between(r["B"], from, to) + testsink.Between(r["C"], from, to)
	for k, w := range weights {
		got, want := float64(testsink.Between(r[k], from, to)), float64(total)*w/wsum
		t.Logf("%s: %v of %d releases over %v (weighted share %.1f)", k, got, total, to.Sub(from).Round(time.Millisecond), want)
		if math.Abs(got-want) > 0.1*want+1 {
			t.Errorf("%s had %v of %d releases while all had work, want %.1f ± 10%%", k, got, total, want)
		}
	}
	// Jain's index over every 10s window (or the whole span, when shorter)
	win := min(10*time.Second, to.Sub(from))
	for w0 := from; !w0.Add(win).After(to); w0 = w0.Add(time.Second) {
		var xs []float64
		for _, k := range []string{"A", "B", "C"} {
			xs = append(xs, float64(testsink.Between(r[k], w0, w0.Add(win)))/weights[k])
		}
		j := shaping.Jain(xs)
		if w0.Equal(from) {
			t.Logf("Jain's index over %v: %.4f (A, B, C per unit of weight: %v)", win.Round(time.Millisecond), j, xs)
		}
		if j < 0.95 {
			t.Errorf("Jain's index %.3f in the %v window at +%v, want ≥ 0.95 (A, B, C per unit of weight: %v)", j, win, w0.Sub(from).Round(time.Millisecond), xs)
		}
	}
	if t.Failed() {
		logTimeline(t, hits, from.Add(-2*time.Second), to.Add(time.Second))
	}
	// the rate: never above rate+1 in a second at release (when shaper
	// called: X-Shaper-Wake; arrivals at the sink are logged), near the
	// rate under backlog
	all := testsink.Times(hits)
	wakes := make([]time.Time, len(hits))
	for i, h := range hits {
		wakes[i] = h.Wake
	}
	t.Logf("most releases in one second: %d at release, %d at the sink", testsink.MaxInWindow(wakes, time.Second), testsink.MaxInWindow(all, time.Second))
	if m := testsink.MaxInWindow(wakes, time.Second); m > 51 {
		t.Errorf("%d releases in one second, want at most 51", m)
	}
	busy := testsink.Between(all, r["A"][149], endBC)
	rate := float64(busy) / endBC.Sub(r["A"][149]).Seconds()
	t.Logf("release rate under backlog %.2f/s (%d releases)", rate, busy)
	if rate < 0.95*50 {
		t.Errorf("release rate under backlog %.2f/s, want ≥ 47.5", rate)
	}
	// A alone again within a second
	// (≥ 80% here; shaperbench measures it on a quiet machine)
	n := testsink.Between(r["A"], endBC.Add(time.Second), endBC.Add(2*time.Second))
	t.Logf("A alone again: %d releases in the second from 1s after B and C finished", n)
	if n < 40 {
		t.Errorf("A had %d releases in the second after B and C finished +1s, want the full rate back (≥ 40)", n)
	}
	checkExpectedStarts(t, hits, "B", recs["B"], time.Second, 2*time.Second, 3*time.Second)
	checkNothingLost(t, prefix, nA+2*nB, len(hits))
}

// logTimeline logs, for a failed share check, each second's releases by
// tenant and by releasing process.
func logTimeline(t *testing.T, hits []testsink.Hit, from, to time.Time) {
	t.Helper()
	var procs []string
	seen := map[string]bool{}
	for _, h := range hits {
		if !seen[h.Process] {
			seen[h.Process] = true
			procs = append(procs, h.Process)
		}
	}
	sort.Strings(procs)
	for s0 := from; s0.Before(to); s0 = s0.Add(time.Second) {
		n := map[string]map[string]int{}
		for _, h := range hits {
			if h.At.Before(s0) || !h.At.Before(s0.Add(time.Second)) {
				continue
			}
			var tt tenantTask
			if json.Unmarshal([]byte(h.Payload), &tt) != nil {
				continue
			}
			if n[tt.T] == nil {
				n[tt.T] = map[string]int{}
			}
			n[tt.T][h.Process]++
		}
		line := fmt.Sprintf("+%5.1fs", s0.Sub(from).Seconds())
		for _, k := range []string{"A", "B", "C"} {
			line += " " + k
			for _, p := range procs {
				line += fmt.Sprintf(" %2d", n[k][p])
			}
		}
		t.Logf("timeline %s", line)
	}
}

// checkExpectedStarts compares tenant's receipts' ExpectedStart (in
// enqueue order) with when the sink saw its tasks, two ways. In order
// (the k-th earliest prediction against the k-th release): how well the
// receipts say when the tenant's tasks are served; 95% within p95, every
// one within worst. Per task: each task against its own prediction, 95%
// within perTask. Per task is looser because the lanes are per process: a
// key's waiting tasks spread over three lanes, each serving the key its
// share, so a task held where more of its key wait starts later than one
// held where fewer do, and the prediction cannot know which lane will
// take it (measured: up to ±1.9s under a CPU hog).
func checkExpectedStarts(t *testing.T, hits []testsink.Hit, tenant string, recs []queue.Receipt, p95, worst, perTask time.Duration) {
	t.Helper()
	at := map[int]time.Time{}
	for _, h := range hits {
		var tt tenantTask
		if json.Unmarshal([]byte(h.Payload), &tt) == nil && tt.T == tenant {
			at[tt.N] = h.At
		}
	}
	var errs []time.Duration
	var preds, starts []time.Time
	for n, rec := range recs {
		if rec.ExpectedStart.IsZero() {
			t.Fatalf("%s #%d: receipt without ExpectedStart", tenant, n)
		}
		if a, ok := at[n]; ok {
			errs = append(errs, a.Sub(rec.ExpectedStart))
			preds, starts = append(preds, rec.ExpectedStart), append(starts, a)
		}
	}
	if len(errs) == 0 {
		t.Fatalf("no task of %s delivered", tenant)
	}
	var series string // on failure: every 10th task's error, in enqueue order
	for i := 0; i < len(errs); i += 10 {
		series += fmt.Sprintf(" #%d:%v", i, errs[i].Round(10*time.Millisecond))
	}
	sortTimes(preds)
	sortTimes(starts)
	inOrder := make([]time.Duration, len(preds))
	for i := range preds {
		inOrder[i] = starts[i].Sub(preds[i])
	}
	q, qw := absQuantiles(inOrder)
	tq, tw := absQuantiles(errs)
	t.Logf("%s: actual − expected start over %d tasks: in order median |%v|, p95 |%v|, worst %v; per task median |%v|, p95 |%v|, worst %v",
		tenant, len(errs), q[0].Round(time.Millisecond), q[1].Round(time.Millisecond), qw.Round(time.Millisecond),
		tq[0].Round(time.Millisecond), tq[1].Round(time.Millisecond), tw.Round(time.Millisecond))
	if q[1] > p95 {
		t.Errorf("%s: in order, 5%% of tasks started more than %v off the expected starts, want within %v", tenant, q[1], p95)
	}
	if qw.Abs() > worst {
		t.Errorf("%s: in order, a task started %v off the expected starts, want within %v", tenant, qw, worst)
	}
	if tq[1] > perTask {
		t.Errorf("%s: 5%% of tasks started more than %v off their own expected start, want within %v", tenant, tq[1], perTask)
	}
	if t.Failed() {
		t.Logf("%s: actual − expected start by task: %s", tenant, series)
	}
}

func sortTimes(ts []time.Time) { sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) }) }

// absQuantiles returns the median and p95 of |d| and the d of largest |d|.
func absQuantiles(ds []time.Duration) ([2]time.Duration, time.Duration) {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i].Abs() < s[j].Abs() })
	return [2]time.Duration{s[len(s)/2].Abs(), s[len(s)*95/100].Abs()}, s[len(s)-1]
}

// checkNothingLost: what the sink saw plus what still waits is what was
// enqueued.
func checkNothingLost(t *testing.T, prefix string, enqueued, delivered int) {
	t.Helper()
	b, err := queue.NewInspector(redistest.Client(t), prefix).Backlog("api")
	if err != nil {
		t.Fatal(err)
	}
	waiting := b.Pending + b.Active + b.Scheduled + b.Retry
	if b.Archived != 0 || b.Retry != 0 {
		t.Errorf("%d archived and %d retried tasks, want none", b.Archived, b.Retry)
	}
	if delivered+waiting != enqueued {
		t.Errorf("%d delivered + %d waiting (%+v) = %d, want %d enqueued", delivered, waiting, b, delivered+waiting, enqueued)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// 100 tenants with unequal backlogs (1 to 1,000 tasks, geometric) on one
// downstream at 50/s, three processes: every tenant's first release comes
// within its fair interval (100 keys / 50/s = 2s) + 1s of its first
// enqueue, nothing is delivered twice or lost; Jain's index over the
// tenants that had a backlog for the first 10s is reported.
func TestFairShareHundredTenants(t *testing.T) {
	sink := testsink.New()
	defer sink.Close()
	prefix := redistest.Prefix(t)
	cfg := fairConfig(t, prefix, sink.URL(), "{key: tenant}")
	p := fairProducer(t, cfg)
	procs := []*proc{startShaper(t, cfg), startShaper(t, cfg), startShaper(t, cfg)}
	const tenants = 100
	sizes := make([]int, tenants)
	total := 0
	for i := range sizes {
		sizes[i] = int(math.Round(math.Pow(1000, float64(i)/(tenants-1))))
		total += sizes[i]
	}
	first := make([]time.Time, tenants)
	var wg sync.WaitGroup
	start := time.Now()
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := tenants - 1 - g; i >= 0; i -= 4 { // big backlogs first
				first[i], _ = enqueueTenant(t, p, fmt.Sprintf("t%03d", i), sizes[i])
			}
		}()
	}
	wg.Wait()
	t.Logf("%d tasks of %d tenants enqueued in %v", total, tenants, time.Since(start).Round(time.Millisecond))
	var r map[string][]time.Time
	waitFor(t, 30*time.Second, "every tenant's first release", func() bool {
		r, _ = releases(t, sink)
		return len(r) == tenants
	})
	from := first[0] // the last tenant's arrival
	for _, f := range first {
		from = maxTime(from, f)
	}
	waitFor(t, 30*time.Second, "10s of releases after the last arrival", func() bool { return time.Since(from) > 10*time.Second+100*time.Millisecond })
	for _, pr := range procs {
		pr.stop(t)
	}
	r, hits := releases(t, sink)
	bound := tenants * time.Second / 50 // the fair interval at 50/s
	var worst time.Duration
	for i := range tenants {
		k := fmt.Sprintf("t%03d", i)
		d := r[k][0].Sub(first[i])
		worst = max(worst, d)
		if d > bound+time.Second {
			t.Errorf("%s (%d tasks): first release %v after its enqueue, want within %v", k, sizes[i], d.Round(time.Millisecond), bound+time.Second)
		}
	}
	// Jain over the 10s after the last arrival, among the tenants whose
	// backlog outlasted it (more than their 10s share at 0.5/s)
	var xs []float64
	for i := range tenants {
		if sizes[i] > 10 {
			xs = append(xs, float64(testsink.Between(r[fmt.Sprintf("t%03d", i)], from, from.Add(10*time.Second))))
		}
	}
	t.Logf("worst first release %v (bound %v); Jain's index over 10s among the %d tenants with a backlog: %.3f",
		worst.Round(time.Millisecond), bound+time.Second, len(xs), shaping.Jain(xs))
	checkNothingLost(t, prefix, total, len(hits))
}
