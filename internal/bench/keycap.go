package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/testsink"
	"github.com/shaper-io/shaper/queue"
)

// RoundKeyCap is the release-path round that measures a cap per key on
// calls in flight (key_concurrency), in first-in first-out and fair order.
const RoundKeyCap = "keycap"

// KeyCapOptions configure round "keycap"; zero fields take the defaults.
type KeyCapOptions struct {
	Rate    int           // the downstream's rate; default 200
	Procs   int           // default 3
	Tenants int           // default 10
	Tasks   int           // per tenant; default 60 (20 quick)
	Call    time.Duration // how long the sink takes to answer; default 100ms
}

func (k KeyCapOptions) withDefaults(quick bool) KeyCapOptions {
	k.Rate, k.Procs, k.Tenants = cmp.Or(k.Rate, 200), cmp.Or(k.Procs, 3), cmp.Or(k.Tenants, 10)
	k.Tasks, k.Call = cmp.Or(k.Tasks, map[bool]int{false: 60, true: 20}[quick]), cmp.Or(k.Call, 100*time.Millisecond)
	return k
}

func (k KeyCapOptions) validate() error {
	if k.Rate < 1 || k.Procs < 1 || k.Tenants < 1 || k.Tasks < 1 || k.Call <= 0 {
		return fmt.Errorf("bench: keycap round needs a rate, processes, tenants, tasks and a call time, got %d, %d, %d, %d, %s",
			k.Rate, k.Procs, k.Tenants, k.Tasks, k.Call)
	}
	return nil
}

// KeyCapRow is one run of round "keycap": P shaper processes (default
// workers) serve a downstream with key_concurrency 1 whose calls take
// Call; Tenants × Tasks tasks, enqueued tenant by tenant in turn before
// the processes start. The queue's asynq active list (the processes'
// taken tasks: waiting for a place or a slot, or in a call) is sampled
// every 50 ms; calls in flight are counted from the sink's arrivals and
// the call time.
type KeyCapRow struct {
	Order     string `json:"order"` // "fifo" or "fair"
	Rate      int    `json:"rate_per_s"`
	Processes int    `json:"processes"`
	Workers   int    `json:"workers_per_process"`
	Tenants   int    `json:"tenants"`
	Tasks     int    `json:"tasks"`
	CallMS    int64  `json:"call_ms"`
	// ActiveMax and ActiveMean are the active list over the run.
	ActiveMax  int     `json:"active_max"`
	ActiveMean float64 `json:"active_mean"`
	// MostInFlight is the most calls under way at once; MostOfAKey the
	// most of one tenant (the cap is 1).
	MostInFlight int     `json:"most_in_flight"`
	MostOfAKey   int     `json:"most_of_a_key"`
	AchievedPerS float64 `json:"achieved_per_s"` // delivered over the first to the last arrival
	Delivered    int     `json:"delivered"`
	Duplicates   int     `json:"duplicates"`
	RunS         float64 `json:"run_s"`
	RedisWork
	Complete bool   `json:"complete"`
	Error    string `json:"error,omitempty"`
}

func (e *env) keyCap(ctx context.Context) []KeyCapRow {
	var out []KeyCapRow
	for _, order := range []string{"fifo", "fair"} {
		if ctx.Err() != nil {
			break
		}
		o := e.opts.KeyCap
		e.logf("keycap: %s, %d processes at %d/s, key_concurrency 1, %d tenants × %d tasks, calls of %s ...", order, o.Procs, o.Rate, o.Tenants, o.Tasks, o.Call)
		r := e.keyCapRun(ctx, order)
		e.logf("keycap: %s: active %d max / %.1f mean; calls in flight at most %d, of one key %d; %.1f/s; %.1f commands per task; %d/%d delivered, %d duplicates%s",
			order, r.ActiveMax, r.ActiveMean, r.MostInFlight, r.MostOfAKey, r.AchievedPerS, r.CmdsPerTask, r.Delivered, r.Tenants*r.Tasks, r.Duplicates, errSuffix(r.Error))
		out = append(out, r)
	}
	return out
}

func (e *env) keyCapRun(ctx context.Context, order string) KeyCapRow {
	o := e.opts.KeyCap
	row := KeyCapRow{Order: order, Rate: o.Rate, Processes: o.Procs, Tenants: o.Tenants, Tasks: o.Tasks, CallMS: o.Call.Milliseconds()}
	n := o.Tenants * o.Tasks
	sink := testsink.New()
	defer sink.Close()
	sink.SetDelay(o.Call)
	prefix := e.prefix("keycap")
	extra := []string{"key_concurrency: 1"}
	if order == "fair" {
		extra = append(extra, "fairness: {}")
	}
	cfg := e.shaperYAML(prefix, httpDownstream(downstream, o.Rate, 0, sink.URL(), extra...))
	p, err := planProducer(e, cfg)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	defer p.Close()
	for i := range o.Tasks {
		for t := range o.Tenants {
			tenant := fmt.Sprint("tenant-", t)
			if err := enqueueTenantTask(ctx, p, tenant, i); err != nil {
				row.Error = err.Error()
				return row
			}
		}
	}
	var stop func(context.Context) error
	var samples []activeSample
	start := time.Now()
	d, err := e.countCommands(ctx, func() error {
		f, err := e.launch(ctx, prefix, o.Procs, cfg, time.Minute)
		if err != nil {
			return err
		}
		stop, row.Workers = f.stop, f.workers()
		stopSampling := e.sampleActive(ctx, keys.New(prefix).Asynq(downstream).Active())
		limit := 2*time.Duration(n/o.Tenants)*o.Call + 30*time.Second
		err = awaitDelivered(ctx, sink, n, start, limit)
		samples = stopSampling()
		row.Complete = err == nil
		return err
	})
	row.RunS = round(time.Since(start).Seconds(), 1)
	stopInto(ctx, stop, &err)
	if err != nil {
		row.Error = err.Error()
	}
	fillKeyCap(&row, samples, sink.OK(), o.Call)
	row.RedisWork = redisWork(d, row.Delivered)
	return row
}

// enqueueTenantTask enqueues task i of tenant (a tenantTask payload).
func enqueueTenantTask(ctx context.Context, p *queue.Producer, tenant string, i int) error {
	b, _ := json.Marshal(tenantTask{tenant, i})
	if _, err := p.Enqueue(ctx, queue.Task{Downstream: downstream, Key: tenant, Payload: b}); err != nil {
		return fmt.Errorf("enqueue %s #%d: %w", tenant, i, err)
	}
	return nil
}

// fillKeyCap computes the columns from the active samples and the sink's
// hits (each call under way from its arrival for call).
func fillKeyCap(row *KeyCapRow, samples []activeSample, hits []testsink.Hit, call time.Duration) {
	sum := 0
	for _, s := range samples {
		row.ActiveMax = max(row.ActiveMax, s.n)
		sum += s.n
	}
	if len(samples) > 0 {
		row.ActiveMean = round(float64(sum)/float64(len(samples)), 1)
	}
	seen := map[string]bool{}
	type edge struct {
		at  time.Time
		d   int
		key string
	}
	var edges []edge
	for _, h := range hits {
		if seen[h.Payload] {
			row.Duplicates++
		}
		seen[h.Payload] = true
		var tt tenantTask
		_ = json.Unmarshal([]byte(h.Payload), &tt)
		edges = append(edges, edge{h.At, 1, tt.T}, edge{h.At.Add(call), -1, tt.T})
	}
	row.Delivered = len(seen)
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.d - b.d // an end before a start at the same instant
	})
	all, per := 0, map[string]int{}
	for _, x := range edges {
		all += x.d
		per[x.key] += x.d
		row.MostInFlight = max(row.MostInFlight, all)
		row.MostOfAKey = max(row.MostOfAKey, per[x.key])
	}
	if lo, hi := spanOf(releaseTimes(hits)); hi.After(lo) {
		row.AchievedPerS = round(float64(len(hits)-1)/hi.Sub(lo).Seconds(), 1)
	}
}

func (r *ReleaseReport) keyCapMarkdown() string {
	if len(r.KeyCap) == 0 {
		return ""
	}
	x0 := r.KeyCap[0]
	t := table{head: []string{"order", "workers per process", "delivered", "active max / mean", "calls in flight at most (of one key)",
		"achieved (/s)", "commands per task", "scripts per task", "top commands"}, align: "lrrrrrrrl"}
	for _, x := range r.KeyCap {
		del := fmt.Sprintf("%d/%d", x.Delivered, x.Tenants*x.Tasks)
		if x.Error != "" {
			del += " (" + x.Error + ")"
		}
		t.add(x.Order, fmt.Sprint(x.Workers), del, fmt.Sprintf("%d / %s", x.ActiveMax, num(x.ActiveMean, 1)),
			fmt.Sprintf("%d (%d)", x.MostInFlight, x.MostOfAKey), num(x.AchievedPerS, 1), num(x.CmdsPerTask, 1), num(x.ScriptsPerTask, 2), "`"+x.Top+"`")
	}
	return fmt.Sprintf("#### 7j. key_concurrency 1 (%d processes at %d/s, default workers; %d tenants × %d tasks, calls of %d ms; asynq's active list every 50 ms)\n\n%s\n",
		x0.Processes, x0.Rate, x0.Tenants, x0.Tasks, x0.CallMS, t.String())
}
