package plan_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/plan"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

func build(t *testing.T, doc string) *plan.Plan {
	t.Helper()
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	p, err := plan.Build(cfg)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return p
}

// The downstreams of the example config, as the dispatcher gets them.
func TestBuildExample(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load("../config/testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []shaping.Downstream{
		{Name: "billing-api", Rate: limiters.Limit{Rate: 50, Period: time.Second, Burst: 1}, Burst: 1, MaxWait: 2 * time.Second, MaxCost: 100, MaxHold: time.Hour, Workers: 160},
		{Name: "legacy-db", Rate: limiters.Limit{Rate: 3000, Period: time.Minute, Burst: 1}, Burst: 1, MaxWait: time.Second, MaxCost: 50, MaxHold: time.Hour, Workers: 51},
		{Name: "audit-log", Rate: limiters.Limit{Rate: 5, Period: 2 * time.Second, Burst: 1}, Burst: 1, MaxWait: 4 * time.Second, MaxCost: 10, MaxHold: time.Hour, Workers: 11},
	} {
		if got := p.Downstreams[i].Shaping; !reflect.DeepEqual(got, want) {
			t.Errorf("downstreams[%d]:\n got %+v\nwant %+v", i, got, want)
		}
		if got := p.Producer.MaxCost[want.Name]; got != want.MaxCost {
			t.Errorf("producer max cost of %s: got %d, want %d (the dispatcher's)", want.Name, got, want.MaxCost)
		}
	}
	if got, want := p.Producer.Downstreams, []string{"billing-api", "legacy-db", "audit-log"}; !reflect.DeepEqual(got, want) {
		t.Errorf("producer downstreams: got %v, want %v", got, want)
	}
	if got, want := p.Producer.MaxRetry, map[string]int{"billing-api": 10, "legacy-db": 25, "audit-log": 0}; !reflect.DeepEqual(got, want) {
		t.Errorf("producer max retry: got %v, want %v", got, want)
	}
	if p.Listen != "127.0.0.1:8080" {
		t.Errorf("listen: got %q, want 127.0.0.1:8080", p.Listen)
	}
	if off := build(t, "http: {listen: off}\ndownstreams: [{name: a, rate: 1/s, handler: {type: log}}]\n"); off.Listen != "" {
		t.Errorf("listen with the server off: got %q, want \"\"", off.Listen)
	}
	if p.Prefix != "shaper" || p.Dispatcher.Prefix != "shaper" || p.Producer.Prefix != "shaper" ||
		p.Dispatcher.ShutdownTimeout != 10*time.Second || p.Dispatcher.RedisTimeout != 2*time.Second || p.Producer.MaxPayload != 1<<20 {
		t.Errorf("prefix %q, dispatcher %+v, producer payload %d", p.Prefix, p.Dispatcher, p.Producer.MaxPayload)
	}

	a, ok := p.Admission["billing-api"]
	if !ok || len(a.Layers) != 2 || !a.Prefilter || a.OnReject != queue.Defer {
		t.Fatalf("admission of billing-api: %+v, %v", a, ok)
	}
	if l := a.Layers[0]; l.Global || l.Limiter.Name != "billing-tenant" || l.Limiter.Limit != limiters.PerSecond(10).WithBurst(20) ||
		l.Limiter.Failure != limiters.FailOpen || l.Limiter.Prefix != "shaper" || l.Limiter.Timeout != 2*time.Second {
		t.Errorf("layers[0] = %+v", l)
	}
	if l := a.Layers[1]; !l.Global || l.Limiter.Algorithm != limiters.FixedWindow || l.Limiter.Limit != limiters.PerMinute(1000) {
		t.Errorf("layers[1] = %+v", l)
	}
	if _, ok := p.Admission["legacy-db"]; ok {
		t.Errorf("legacy-db has no admission in the file, got one in the plan")
	}
	if d, ok := p.Downstream("legacy-db"); !ok || d.Shaping.Name != "legacy-db" || d.Written.Rate != "3000/m" {
		t.Errorf("Downstream(legacy-db) = %+v, %v", d, ok)
	}
	if _, ok := p.Downstream("nope"); ok {
		t.Errorf("Downstream(nope) found")
	}
}

func TestBuildBatch(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load("../config/testdata/batch.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := p.Downstreams[0].Shaping
	if got, want := d.Batch, (&shaping.Batch{MaxRows: 500, MaxDelay: 2 * time.Second, Grace: time.Second}); !reflect.DeepEqual(got, want) {
		t.Errorf("batch: got %+v, want %+v", got, want)
	}
	if d.LateTolerance != 125*time.Millisecond {
		t.Errorf("late tolerance: got %s, want 125ms (half a 500-row slot at 2000/s)", d.LateTolerance)
	}
	if got, want := p.Producer.Batched["warehouse"], shaping.BatchGroups(2000, 500); got != want {
		t.Errorf("batch groups: got %d, want %d", got, want)
	}
	if d.Workers != 9 {
		t.Errorf("workers: got %d, want 9 (sized in batches)", d.Workers)
	}
}

func TestBuildBatchDefaults(t *testing.T) {
	t.Parallel()
	p := build(t, `
downstreams:
  - name: db
    rate: 100/s
    schedule: [{cron: "0 20 * * *", rate: 5000/s}]
    batch: {max_rows: 100}
    handler: {type: postgres, dsn_env: DB_DSN, table: t, id_column: id, columns: {a: a}}
  - name: api
    rate: 10/s
    handler: {type: log}
  - name: slow
    rate: 1/s
    batch: {max_rows: 100}
    adaptive: {floor: 1/s, ceiling: 3000/s}
    handler: {type: log}
`)
	// The schedule's 5000/s, not the 100/s, sizes the groups.
	if got, want := p.Producer.Batched["db"], shaping.BatchGroups(5000, 100); got != want {
		t.Errorf("batch groups: got %d, want %d (for the schedule's highest rate)", got, want)
	}
	// So does an adaptive ceiling above the rate.
	if got, want := p.Producer.Batched["slow"], shaping.BatchGroups(3000, 100); got != want {
		t.Errorf("batch groups: got %d, want %d (for the adaptive ceiling)", got, want)
	}
	// A full batch at 1/s is 100s of slot: the tolerance stops at 1s.
	if got := p.Downstreams[2].Shaping.LateTolerance; got != time.Second {
		t.Errorf("late tolerance of a slow batch: got %s, want 1s", got)
	}
	api := p.Downstreams[1].Shaping
	if _, batched := p.Producer.Batched["api"]; api.Batch != nil || batched || api.LateTolerance != 0 {
		t.Errorf("a downstream without batch: got %v, batched %v, %s late tolerance; want nil, false, 0", api.Batch, batched, api.LateTolerance)
	}
	if api.Workers != 11 {
		t.Errorf("workers of a downstream without batch: got %d, want 11", api.Workers)
	}
}

func TestBuildScheduleAdaptiveCron(t *testing.T) {
	t.Parallel()
	p := build(t, `
redis: {url: "redis://127.0.0.1:6379"}
downstreams:
  - name: legacy-db
    rate: 50/s
    timezone: Europe/Berlin
    schedule:
      - {cron: "0 8 * * 1-5", rate: 50/s}
      - {cron: "0 20 * * 1-5", rate: 500/s}
    adaptive: {floor: 5/s, ceiling: 100/s, decrease: 0.5}
    handler: {type: log}
  - name: api
    rate: 20/s
    adaptive: {floor: 1/s, step: 2/s, interval: 3s}
    handler: {type: log}
cron:
  - {name: nightly, schedule: "0 2 * * *", timezone: Europe/Berlin, downstream: legacy-db, payload: {table: orders}}
`)
	d := p.Downstreams[0].Shaping
	if len(d.Schedule) != 2 || d.Schedule[1].Rate != limiters.PerSecond(500) {
		t.Fatalf("schedule: %+v", d.Schedule)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	// Monday 20:00 in Berlin is the night rate.
	if rate, _, ok := d.Schedule.At(time.Date(2026, 3, 2, 20, 0, 30, 0, berlin)); !ok || rate.PerSec() != 500 {
		t.Errorf("rate at Monday 20:00:30 Berlin: %v, %v; want 500/s", rate, ok)
	}
	if a := d.Adaptive; a == nil || a.Floor.PerSec() != 5 || a.Ceiling.PerSec() != 100 || a.Decrease != 0.5 {
		t.Errorf("adaptive = %+v", a)
	}
	// The ceiling defaults to the downstream's rate.
	if a := p.Downstreams[1].Shaping.Adaptive; a == nil || a.Ceiling != p.Downstreams[1].Shaping.Rate || a.Step.PerSec() != 2 || a.Interval != 3*time.Second {
		t.Errorf("adaptive of api = %+v", a)
	}
	if len(p.Cron) != 1 {
		t.Fatalf("cron: %+v", p.Cron)
	}
	j := p.Cron[0]
	if j.Name != "nightly" || j.Task.Downstream != "legacy-db" || j.Task.Type != "shaper:cron" || j.Task.Cost != 1 || string(j.Task.Payload) != `{"table":"orders"}` {
		t.Errorf("cron job: %+v", j)
	}
	if next := j.Schedule.Next(time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)); !next.Equal(time.Date(2026, 3, 3, 2, 0, 0, 0, berlin)) {
		t.Errorf("next tick after Monday noon UTC: %s, want 02:00 Berlin", next)
	}
}

// A breaker reaches the dispatcher with the file's values and the
// defaults of the fields left out; the dispatcher accepts it.
func TestBuildBreaker(t *testing.T) {
	t.Parallel()
	p := build(t, "downstreams:\n  - {name: api, rate: 20/s, handler: {type: log}, breaker: {window: 2s, min_calls: 10, probe_rate: 2/s}}\n  - {name: b, rate: 1/s, handler: {type: log}}\n")
	want := &shaping.Breaker{ErrorRatio: 0.5, Window: 2 * time.Second, MinCalls: 10, Cooldown: 5 * time.Second, MaxCooldown: 2 * time.Minute,
		ProbeRate: limiters.PerSecond(2), Probes: 3}
	if got := p.Downstreams[0].Shaping.Breaker; !reflect.DeepEqual(got, want) {
		t.Errorf("breaker: got %+v, want %+v", got, want)
	}
	if got := p.Downstreams[1].Shaping.Breaker; got != nil {
		t.Errorf("a downstream without a breaker: got %+v, want nil", got)
	}
	d := shaping.New(nil, shaping.Config{})
	ds := p.Downstreams[0].Shaping
	ds.Handler = shaping.LogHandler(t.Logf)
	if err := d.Add(ds); err != nil {
		t.Errorf("Add of the planned downstream: %v", err)
	}
}

// Quotas reach the dispatcher as shaping.Quota, aligned ones with their
// offset; the default max cost stays within the smallest quota.
func TestBuildQuotas(t *testing.T) {
	t.Parallel()
	p := build(t, `
downstreams:
  - name: partner
    rate: 50/s
    quotas:
      - {limit: 40, per: 1h}
      - {limit: 100000, per: 24h, align: "06:00 +02:00", spread: true, margin: 100ms}
    handler: {type: log}
`)
	sd := p.Downstreams[0].Shaping
	want := []shaping.Quota{{Limit: 40, Per: time.Hour},
		{Limit: 100000, Per: 24 * time.Hour, Aligned: true, Offset: 4 * time.Hour, Spread: true, Margin: 100 * time.Millisecond}}
	if !reflect.DeepEqual(sd.Quotas, want) {
		t.Errorf("quotas:\n got %+v\nwant %+v", sd.Quotas, want)
	}
	if sd.MaxCost != 40 || p.Producer.MaxCost["partner"] != 40 {
		t.Errorf("max cost %d (producer %d), want 40: the bucket holds 50 but the smallest quota is 40", sd.MaxCost, p.Producer.MaxCost["partner"])
	}
}

// Downstreams that may be held for a day (quotas; the http handler, which
// reads announced limits) give their tasks an attempt timeout beyond it;
// a Go or log handler keeps asynq's default.
func TestBuildHoldTimeout(t *testing.T) {
	p := build(t, `downstreams:
  - {name: quota, rate: 5/s, quotas: [{limit: 100, per: 24h}], handler: {type: log}}
  - {name: api, rate: 5/s, handler: {type: http, url: "http://127.0.0.1:1/x"}}
  - {name: plain, rate: 5/s, handler: {type: log}}
`)
	for name, want := range map[string]time.Duration{"quota": plan.HoldTimeout, "api": plan.HoldTimeout, "plain": 0} {
		if got := p.Producer.Shaping[name].HoldTimeout; got != want {
			t.Errorf("%s: HoldTimeout %v, want %v", name, got, want)
		}
	}
}

// max_hold reaches the dispatcher's Downstream.MaxHold (default 1h), and
// the default max cost stays within what a spread quota paces in a day.
func TestBuildMaxHoldAndSpreadCost(t *testing.T) {
	t.Parallel()
	p := build(t, "downstreams:\n  - {name: a, rate: 10/s, max_hold: 10m, handler: {type: log}}\n  - {name: b, rate: 10/s, handler: {type: log}}\n"+
		"  - {name: c, rate: 10/s, quotas: [{limit: 7, per: 7d, spread: true}], handler: {type: log}}\n")
	for name, want := range map[string]time.Duration{"a": 10 * time.Minute, "b": shaping.DefaultMaxHold, "c": time.Hour} {
		if pd, _ := p.Downstream(name); pd.Shaping.MaxHold != want {
			t.Errorf("%s: MaxHold %s, want %s", name, pd.Shaping.MaxHold, want)
		}
	}
	if pd, _ := p.Downstream("c"); pd.Shaping.MaxCost != 1 || p.Producer.MaxCost["c"] != 1 {
		t.Errorf("max cost under a spread quota of one unit a day: dispatcher %d, producer %d; want 1", pd.Shaping.MaxCost, p.Producer.MaxCost["c"])
	}
}
