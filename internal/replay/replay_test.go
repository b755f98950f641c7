package replay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shaper-io/shaper/internal/clocktest"
	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/metrics"
	"github.com/shaper-io/shaper/internal/plan"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/replay"
	"github.com/shaper-io/shaper/queue"
)

func TestMain(m *testing.M) { redistest.Main(m) }

const cfgYAML = `
downstreams:
  - name: api
    rate: 10/s
    handler: {type: log}
    admission:
      limiters:
        - {name: tenant, algorithm: token_bucket, key: tenant, rate: 2/s, burst: 4}
        - {name: global, algorithm: fixed_window, key: global, rate: 8/s}
        - {name: trial, algorithm: sliding_log, key: tenant, rate: 1/s, mode: shadow}
  - name: batch
    rate: 2/s
    handler: {type: log}
    admission:
      on_reject: defer
      limiters:
        - {name: batch-tenant, algorithm: leaky_bucket, key: tenant, rate: 1/s, burst: 3}
        - {name: batch-window, algorithm: sliding_counter, key: global, rate: 3/s}
`

func buildPlan(tb testing.TB, prefix string) *plan.Plan {
	tb.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf("redis: {prefix: %q}\n", prefix) + cfgYAML))
	if err != nil {
		tb.Fatal(err)
	}
	pl, err := plan.Build(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return pl
}

// recorded writes a log of 600 arrivals over 20s (Poisson-ish, four
// tenants, costs 1 and 2, two downstreams) and returns its path.
func recorded(t *testing.T, t0 time.Time) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	var b bytes.Buffer
	at := t0
	for range 600 {
		at = at.Add(time.Duration(rng.ExpFloat64() * float64(33*time.Millisecond)))
		ds := "api"
		if rng.IntN(4) == 0 {
			ds = "batch"
		}
		fmt.Fprintf(&b, `{"ts":%q,"downstream":%q,"key":"tenant-%d","cost":%d}`+"\n",
			at.UTC().Format(time.RFC3339Nano), ds, rng.IntN(4), 1+rng.IntN(2))
	}
	path := filepath.Join(t.TempDir(), "arrivals.jsonl")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func outcome(o queue.Outcome) string {
	switch o {
	case queue.Accepted:
		return replay.Admitted
	case queue.Deferred:
		return replay.Deferred
	case queue.Rejected:
		return replay.Rejected
	}
	return o.String()
}

// A recorded arrival file, replayed on the embedded Redis, gives the same
// decisions, arrival by arrival, as a live run of the same arrivals: the
// producer on a real redis-server, its limiters deciding at each
// arrival's time.
func TestReplayMatchesALiveRun(t *testing.T) {
	t.Parallel()
	t0 := time.Now().Truncate(time.Second).Add(time.Second)
	path := recorded(t, t0)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	arrivals, err := replay.Parse(f, "")
	f.Close()
	if err != nil || len(arrivals) != 600 {
		t.Fatalf("Parse: %d arrivals, %v", len(arrivals), err)
	}

	// The live run.
	rdb := redistest.Client(t)
	pl := buildPlan(t, redistest.Prefix(t))
	clk := clocktest.New(t0)
	adm, err := pl.NewAdmissionAt(rdb, nil, clk)
	if err != nil {
		t.Fatal(err)
	}
	pc := pl.Producer
	reg := prometheus.NewRegistry()
	pc.Admission, pc.Registerer = adm, reg
	p := queue.NewProducer(rdb, pc)
	defer p.Close()
	live := map[int][2]string{}
	for _, a := range arrivals {
		clk.AdvanceTo(a.TS)
		rec, err := p.Enqueue(context.Background(), queue.Task{Downstream: a.Downstream, Key: a.Key, Cost: a.Cost})
		if rec.Outcome != queue.Accepted && rec.Outcome != queue.Deferred && rec.Outcome != queue.Rejected {
			t.Fatalf("line %d: live %s, %v", a.Line, rec.Outcome, err)
		}
		lim := ""
		if rec.Outcome != queue.Accepted {
			lim = rec.Admission.Name
		}
		live[a.Line] = [2]string{outcome(rec.Outcome), lim}
	}

	// The replay, on its embedded Redis.
	var ds []replay.Decision
	f, err = os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := replay.Run(context.Background(), buildPlan(t, "replay"), f, replay.Options{
		Decisions: func(d replay.Decision) error { ds = append(ds, d); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for i, d := range ds {
		counts[d.Downstream+" "+d.Outcome]++
		if d.Line != arrivals[i].Line {
			t.Errorf("decision %d is line %d's, want line %d's: decisions come in the log's order", i, d.Line, arrivals[i].Line)
		}
		if got, want := [2]string{d.Outcome, d.Limiter}, live[d.Line]; got != want {
			t.Errorf("line %d (%s %s cost %d): replay %v, live %v", d.Line, d.Downstream, d.Key, d.Cost, got, want)
		}
	}
	if len(ds) != 600 || rep.Arrivals != 600 {
		t.Fatalf("%d decisions, report of %d arrivals; want 600", len(ds), rep.Arrivals)
	}
	liveShadow := testutil.ToFloat64(metrics.New(reg).ShadowDecisions.WithLabelValues("api", "trial", "rejected"))
	replayShadow := rep.Downstreams[0].ShadowRejected["trial"]
	if liveShadow != float64(replayShadow) || replayShadow == 0 {
		t.Errorf("shadow limiter trial: %d would-rejects in the replay, %v live; want the same, not 0", replayShadow, liveShadow)
	}
	t.Logf("600 arrivals, replay = live on every one: %v; shadow limiter would have rejected %d (live %v)", counts, replayShadow, liveShadow)
	for _, k := range []string{"api admitted", "api rejected", "batch admitted", "batch deferred"} {
		if counts[k] == 0 {
			t.Errorf("no %q decision: the traffic does not exercise the config", k)
		}
	}
}

// The shaping waits are the FIFO waits of the downstream's bucket: ten
// tasks at once at 5/s wait 0, 0.2s, … 1.8s; a deferred task waits from its
// Retry-After, rounded up to the second.
func TestReplayWaitsAndDeferrals(t *testing.T) {
	t.Parallel()
	pl := planOf(t, `
downstreams:
  - name: api
    rate: 5/s
    handler: {type: log}
    admission: {on_reject: defer, limiters: [{name: tb, rate: 1/s, burst: 9}]}
`)
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	var log bytes.Buffer
	for range 10 {
		fmt.Fprintf(&log, `{"ts":%d,"key":"k"}`+"\n", t0.Unix())
	}
	ds, rep := run(t, pl, log.String(), replay.Options{})
	for i, d := range ds[:9] {
		if d.Outcome != replay.Admitted || d.WaitSeconds == nil || *d.WaitSeconds < float64(i)*0.2-1e-6 || *d.WaitSeconds > float64(i)*0.2+1e-3 {
			t.Errorf("arrival %d: %s, wait %v; want admitted, waiting %.1fs", i, d.Outcome, deref(d.WaitSeconds), float64(i)*0.2)
		}
	}
	// The tenth is deferred to t0+1s (its Retry-After), behind nine slots
	// that end at t0+1.8s.
	last := ds[9]
	if last.Outcome != replay.Deferred || last.Limiter != "tb" || last.Start == nil || !last.Start.Equal(t0.Add(1800*time.Millisecond)) {
		t.Errorf("tenth: %+v (start %v), want deferred by tb, starting at t0+1.8s", last, last.Start)
	}
	s := rep.Downstreams
	if len(s) != 1 || s[0].Admitted != 9 || s[0].Deferred != 1 || s[0].Wait.Max < 0.8 || s[0].Wait.Count != 10 {
		t.Errorf("summary %+v", s)
	}
	js, _ := json.Marshal(s)
	t.Logf("summary %s", js)
}

// run replays log through pl and returns the decisions and the report.
func run(t *testing.T, pl *plan.Plan, log string, opt replay.Options) ([]replay.Decision, *replay.Report) {
	t.Helper()
	var ds []replay.Decision
	opt.Decisions = func(d replay.Decision) error { ds = append(ds, d); return nil }
	rep, err := replay.Run(context.Background(), pl, strings.NewReader(log), opt)
	if err != nil {
		t.Fatal(err)
	}
	return ds, rep
}

// planOf builds the plan of a config.
func planOf(t *testing.T, yaml string) *plan.Plan {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}
