package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/plan"
	"github.com/shaper-io/shaper/internal/testsink"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// FairRow is round "fair": FairProcs shaper processes, one
// downstream at FairRate with the default config otherwise. Tenant A
// enqueues FairTasksA tasks; FairDelay after A's first enqueue B and C
// enqueue FairTasksBC each, side by side, through the producer the daemon
// builds from the same config (internal/plan). One row per mode (FIFO,
// fair, fair 2:1:1), each drained to the end. Waits and shares are by
// release time (X-Shaper-Released).
type FairRow struct {
	Mode      string `json:"mode"`
	Fairness  string `json:"fairness,omitempty"` // the YAML value; "" is FIFO
	Rate      int    `json:"rate_per_s"`
	Processes int    `json:"processes"`
	Workers   int    `json:"workers_per_process"`
	TasksA    int    `json:"tasks_a"`
	TasksBC   int    `json:"tasks_b_c"` // each
	Delivered int    `json:"delivered"`
	// Duplicates are deliveries beyond the first of a task.
	Duplicates int  `json:"duplicates"`
	Complete   bool `json:"complete"`
	// BFirstS is B's first release after B's first enqueue; BLastS its
	// last (B is done); BWaitP50S and BWaitP99S are over B's tasks, each
	// from its own enqueue to its first release.
	BFirstS   float64 `json:"b_first_release_s"`
	BLastS    float64 `json:"b_last_release_s"`
	BWaitP50S float64 `json:"b_wait_p50_s"`
	BWaitP99S float64 `json:"b_wait_p99_s"`
	// BExpErr* are |release − the receipt's ExpectedStart| over B's tasks:
	// how far the enqueue reply's prediction was off.
	BExpErrP50S float64 `json:"b_expected_start_err_p50_s"`
	BExpErrP95S float64 `json:"b_expected_start_err_p95_s"`
	BExpErrMaxS float64 `json:"b_expected_start_err_max_s"`
	BExpTasks   int     `json:"b_expected_start_tasks"` // B's tasks with a prediction (0: none, as in FIFO)
	// BusyS is how long all three had work: from the last of the three
	// first enqueues to the first of the three last releases. ShareA..C
	// are each tenant's part of the releases in it, Jain is Jain's index
	// of their releases per unit of weight (1: the configured shares
	// exactly; 1/3: one tenant took everything). FIFO counts as 1:1:1.
	BusyS  float64 `json:"all_had_work_s"`
	ShareA float64 `json:"share_a"`
	ShareB float64 `json:"share_b"`
	ShareC float64 `json:"share_c"`
	Jain   float64 `json:"jain"`
	// RateUnderBacklog is releases per second over the run without its
	// first second (there is a backlog until the last release); MaxIn1s
	// the most releases in any 1 s.
	RateUnderBacklog float64 `json:"rate_under_backlog_per_s"`
	MaxIn1s          int     `json:"max_in_any_1s_at_release"`
	// RedisWork is the INFO commandstats delta from just before the
	// processes start to the last delivery: start-up, every enqueue (the
	// producer's park in fair order included) and every release.
	RedisWork
	RunS  float64 `json:"run_s"`
	Error string  `json:"error,omitempty"`
}

// fairMode is one way the fair round runs the same load.
type fairMode struct {
	name, fairness string // fairness "" is FIFO
	weights        map[string]float64
}

// fairTenants are the round's tenants: A the big backlog, B and C late.
var fairTenants = []string{"A", "B", "C"}

func fairModes() []fairMode {
	even := map[string]float64{"A": 1, "B": 1, "C": 1}
	return []fairMode{
		{"FIFO", "", even},
		{"fair", "{key: tenant}", even},
		{"fair 2:1:1", "{key: tenant, weights: {A: 2}}", map[string]float64{"A": 2, "B": 1, "C": 1}},
	}
}

func (e *env) fair(ctx context.Context) []FairRow {
	o := e.opts
	var rows []FairRow
	for _, m := range fairModes() {
		e.logf("fair: %s, %d processes at %d/s, A %d tasks, %s later B and C %d each ...", m.name, o.FairProcs, o.FairRate,
			o.FairTasksA, o.FairDelay, o.FairTasksBC)
		row := e.fairRun(ctx, m)
		e.logf("fair: %s: B first %.2f s, done %.2f s, wait p50 %.2f p99 %.2f s; shares %.3f/%.3f/%.3f over %.1f s, Jain %.3f; %.1f/s, max %d in 1 s; %.1f commands per task (%d/%d delivered)%s",
			m.name, row.BFirstS, row.BLastS, row.BWaitP50S, row.BWaitP99S, row.ShareA, row.ShareB, row.ShareC, row.BusyS, row.Jain,
			row.RateUnderBacklog, row.MaxIn1s, row.CmdsPerTask, row.Delivered, o.FairTasksA+2*o.FairTasksBC, errSuffix(row.Error))
		rows = append(rows, row)
		if ctx.Err() != nil {
			break
		}
	}
	return rows
}

// fairRun runs one mode: processes, then A's backlog, then B's and C's.
func (e *env) fairRun(ctx context.Context, m fairMode) FairRow {
	o := e.opts
	row := FairRow{Mode: m.name, Fairness: m.fairness, Rate: o.FairRate, Processes: o.FairProcs, TasksA: o.FairTasksA, TasksBC: o.FairTasksBC}
	n := o.FairTasksA + 2*o.FairTasksBC
	sink := testsink.New()
	defer sink.Close()
	prefix := e.prefix("fair")
	var extra []string
	if m.fairness != "" {
		extra = append(extra, "fairness: "+m.fairness)
	}
	cfg := e.shaperYAML(prefix, httpDownstream(downstream, o.FairRate, 0, sink.URL(), extra...))
	p, err := planProducer(e, cfg)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	defer p.Close()
	enq, exp := map[string][]time.Time{}, map[string][]time.Time{}
	limit := o.FairDelay + 2*time.Duration(float64(n)/float64(o.FairRate)*float64(time.Second)) + 30*time.Second
	var stop func(context.Context) error
	start := time.Now()
	d, err := e.countCommands(ctx, func() error {
		f, err := e.launch(ctx, prefix, o.FairProcs, cfg, time.Minute)
		if err != nil {
			return err
		}
		stop, row.Workers = f.stop, f.workers()
		if enq["A"], exp["A"], err = enqueueTenant(ctx, p, "A", o.FairTasksA); err != nil {
			return err
		}
		sleepCtx(ctx, time.Until(enq["A"][0].Add(o.FairDelay)))
		var wg sync.WaitGroup
		errs := make([]error, 2)
		late, lateExp := make([][]time.Time, 2), make([][]time.Time, 2)
		for i, k := range []string{"B", "C"} {
			wg.Add(1)
			go func() { defer wg.Done(); late[i], lateExp[i], errs[i] = enqueueTenant(ctx, p, k, o.FairTasksBC) }()
		}
		wg.Wait()
		enq["B"], enq["C"], exp["B"], exp["C"] = late[0], late[1], lateExp[0], lateExp[1]
		if err := errors.Join(errs...); err != nil {
			return err
		}
		err = awaitDelivered(ctx, sink, n, start, limit)
		row.Complete = err == nil
		return err
	})
	row.RunS = round(time.Since(start).Seconds(), 1)
	stopInto(ctx, stop, &err)
	if err != nil {
		row.Error = err.Error()
	}
	fillFair(&row, enq, exp, sink.OK(), m.weights)
	row.RedisWork = redisWork(d, row.Delivered)
	return row
}

// planProducer is the producer the daemon builds from cfg (fair order for
// a downstream with fairness), on the run's Redis.
func planProducer(e *env, cfg string) (*queue.Producer, error) {
	c, err := config.Parse([]byte(cfg))
	if err != nil {
		return nil, err
	}
	pl, err := plan.Build(c)
	if err != nil {
		return nil, err
	}
	return queue.NewProducer(e.rdb, pl.Producer), nil
}

// tenantTask is a fair-round payload: tenant and sequence number.
type tenantTask struct {
	T string `json:"t"`
	N int    `json:"n"`
}

// enqueueTenant enqueues n tasks of tenant in order and returns when each
// enqueue began and the start its receipt expected.
func enqueueTenant(ctx context.Context, p *queue.Producer, tenant string, n int) (at, exp []time.Time, err error) {
	at, exp = make([]time.Time, 0, n), make([]time.Time, 0, n)
	for i := range n {
		b, _ := json.Marshal(tenantTask{tenant, i})
		at = append(at, time.Now())
		rec, err := p.Enqueue(ctx, queue.Task{Downstream: downstream, Key: tenant, Payload: b})
		if err != nil {
			return at, exp, fmt.Errorf("enqueue %s #%d: %w", tenant, i, err)
		}
		exp = append(exp, rec.ExpectedStart)
	}
	return at, exp, nil
}

// fillFair computes the measured columns of row from each tenant's enqueue
// times and expected starts (by sequence number; exp may be nil) and the
// sink's hits; weights give Jain's index its unit.
func fillFair(row *FairRow, enq, exp map[string][]time.Time, hits []testsink.Hit, weights map[string]float64) {
	var rel map[string][]time.Time
	rel, row.Delivered, row.Duplicates = tenantReleases(enq, hits)
	all := releaseTimes(hits)
	row.RateUnderBacklog = round(keepUpRate(all, time.Second), 2)
	row.MaxIn1s = testsink.MaxInWindow(all, time.Second)
	if w := taskWaits(enq["B"], rel["B"]); len(w) > 0 {
		row.BWaitP50S, row.BWaitP99S = round(percentile(w, 0.5), 2), round(percentile(w, 0.99), 2)
		first, last := spanOf(rel["B"])
		row.BFirstS, row.BLastS = round(first.Sub(enq["B"][0]).Seconds(), 2), round(last.Sub(enq["B"][0]).Seconds(), 2)
	}
	if e := expectedErrs(exp["B"], rel["B"]); len(e) > 0 {
		row.BExpErrP50S, row.BExpErrP95S = round(percentile(e, 0.5), 2), round(percentile(e, 0.95), 2)
		row.BExpErrMaxS, row.BExpTasks = round(percentile(e, 1), 2), len(e)
	}
	sh := busyShares(enq, rel, weights)
	row.BusyS, row.Jain = round(sh.span.Seconds(), 2), round(sh.jain, 4)
	row.ShareA, row.ShareB, row.ShareC = round(sh.share["A"], 3), round(sh.share["B"], 3), round(sh.share["C"], 3)
}

// tenantReleases is the first release of each task the hits hold, by
// tenant and sequence number (tasks of enq only), with the count of
// distinct tasks and of deliveries beyond a task's first.
func tenantReleases(enq map[string][]time.Time, hits []testsink.Hit) (rel map[string][]time.Time, delivered, dups int) {
	rel = map[string][]time.Time{}
	seen := map[tenantTask]bool{}
	for _, h := range hits {
		var t tenantTask
		if json.Unmarshal([]byte(h.Payload), &t) != nil || t.N < 0 || t.N >= len(enq[t.T]) {
			continue
		}
		at := h.At
		if !h.Wake.IsZero() {
			at = h.Wake
		}
		if seen[t] {
			dups++
			continue
		}
		seen[t] = true
		if rel[t.T] == nil {
			rel[t.T] = make([]time.Time, len(enq[t.T]))
		}
		rel[t.T][t.N] = at
	}
	return rel, len(seen), dups
}

// taskWaits are release − enqueue in seconds of the tasks released.
func taskWaits(enq, rel []time.Time) []float64 {
	var w []float64
	for i, r := range rel {
		if !r.IsZero() && i < len(enq) {
			w = append(w, r.Sub(enq[i]).Seconds())
		}
	}
	return w
}

// expectedErrs are |release − expected start| in seconds of the tasks
// released that had an expected start.
func expectedErrs(exp, rel []time.Time) []float64 {
	var e []float64
	for i, r := range rel {
		if !r.IsZero() && i < len(exp) && !exp[i].IsZero() {
			e = append(e, math.Abs(r.Sub(exp[i]).Seconds()))
		}
	}
	return e
}

// spanOf is the earliest and latest of the non-zero times in ts.
func spanOf(ts []time.Time) (lo, hi time.Time) {
	for _, t := range ts {
		if t.IsZero() {
			continue
		}
		if lo.IsZero() || t.Before(lo) {
			lo = t
		}
		if t.After(hi) {
			hi = t
		}
	}
	return lo, hi
}

// shares is what busyShares measured.
type shares struct {
	span  time.Duration      // how long every tenant had work; ≤ 0: never together
	share map[string]float64 // part of the releases in it
	jain  float64            // of releases per unit of weight; 0 when span ≤ 0
}

// busyShares measures the tenants' shares while all of them had work: a
// tenant has work from its first enqueue until its last release, so the
// window runs from the latest first enqueue to the earliest last release.
// enq and rel are indexed by task (a zero release: not released).
func busyShares(enq, rel map[string][]time.Time, weights map[string]float64) shares {
	return busySharesOf(fairTenants, enq, rel, weights)
}

// busySharesOf is busyShares over the given tenants.
func busySharesOf(tenants []string, enq, rel map[string][]time.Time, weights map[string]float64) shares {
	var from, to time.Time
	for i, k := range tenants {
		if len(enq[k]) == 0 {
			return shares{}
		}
		_, last := spanOf(rel[k])
		if f := enq[k][0]; i == 0 || f.After(from) {
			from = f
		}
		if i == 0 || last.Before(to) {
			to = last
		}
	}
	out := shares{span: to.Sub(from), share: map[string]float64{}}
	if out.span <= 0 {
		return out
	}
	counts := map[string]float64{}
	var total float64
	for _, k := range tenants {
		for _, t := range rel[k] {
			// Both ends count: the window closes on a release.
			if !t.IsZero() && !t.Before(from) && !t.After(to) {
				counts[k]++
				total++
			}
		}
	}
	var xs []float64
	for _, k := range tenants {
		if total > 0 {
			out.share[k] = counts[k] / total
		}
		xs = append(xs, counts[k]/weights[k])
	}
	out.jain = shaping.Jain(xs)
	return out
}

// expErr renders B's expected-start errors, "–" without predictions.
func expErr(x FairRow) string {
	if x.BExpTasks == 0 {
		return "–"
	}
	return fmt.Sprintf("%s / %s / %s s", num(x.BExpErrP50S, 2), num(x.BExpErrP95S, 2), num(x.BExpErrMaxS, 2))
}

// fairTable renders the fair round's rows.
func fairTable(rows []FairRow) string {
	t := table{head: []string{"mode", "fairness", "workers per process", "delivered", "B: first release", "B: done",
		"B: wait p50 / p99", "B: expected-start error p50 / p95 / max", "all three had work", "shares A / B / C", "Jain's index", "rate under backlog (/s)",
		"max in any 1 s", "commands per task", "scripts per task", "top commands"}, align: "llrrrrrrrrrrrrrl"}
	for _, x := range rows {
		fairness := "– (FIFO)"
		if x.Fairness != "" {
			fairness = "`" + x.Fairness + "`"
		}
		del := fmt.Sprintf("%d/%d", x.Delivered, x.TasksA+2*x.TasksBC)
		if x.Duplicates > 0 {
			del += fmt.Sprintf(" (+%d duplicates)", x.Duplicates)
		}
		if x.Error != "" {
			del += " (" + x.Error + ")"
		}
		sh, jain := "–", "–"
		if x.BusyS > 0 {
			sh, jain = fmt.Sprintf("%s / %s / %s", num(x.ShareA, 3), num(x.ShareB, 3), num(x.ShareC, 3)), num(x.Jain, 3)
		}
		t.add(x.Mode, fairness, fmt.Sprint(x.Workers), del, num(x.BFirstS, 2)+" s", num(x.BLastS, 2)+" s",
			fmt.Sprintf("%s / %s s", num(x.BWaitP50S, 2), num(x.BWaitP99S, 2)),
			expErr(x), num(x.BusyS, 1)+" s", sh, jain,
			num(x.RateUnderBacklog, 1), fmt.Sprintf("%d (limit %d)", x.MaxIn1s, x.Rate+1), num(x.CmdsPerTask, 1),
			num(x.ScriptsPerTask, 2), "`"+x.Top+"`")
	}
	return t.String()
}
