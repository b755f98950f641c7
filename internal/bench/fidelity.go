package bench

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/shaper-io/shaper/internal/testsink"
)

// FidelityRow is one fidelity run: one contender, P processes, draining a
// backlog into the recording sink at a configured rate. It carries the
// deferral-fairness columns (scenario 2) too, measured on the same run.
type FidelityRow struct {
	Contender string `json:"contender"`
	Processes int    `json:"processes"`
	Hosting   string `json:"hosting"`
	Rate      int    `json:"rate_per_s"`
	Workers   int    `json:"workers_per_process"`
	Backlog   int    `json:"backlog"`
	// Delivered counts distinct tasks that reached the sink; Releases
	// counts every request (duplicates of at-least-once delivery too).
	Delivered int  `json:"delivered"`
	Releases  int  `json:"releases"`
	Complete  bool `json:"complete"`
	// AchievedRate is (releases−1)/(last−first), releases per second.
	AchievedRate float64 `json:"achieved_rate_per_s"`
	// MaxIn1s is the most requests arriving at the sink inside any
	// sliding 1 s window; MaxIn1sRelease counts them by release time
	// instead (X-Shaper-Released, stamped by the releasing process just
	// before its request), which leaves out jitter added on the way (the
	// sink shares the starved CPU).
	MaxIn1s        int     `json:"max_in_any_1s"`
	MaxIn1sRelease int     `json:"max_in_any_1s_at_release"`
	IntervalP50ms  float64 `json:"interval_p50_ms"`
	IntervalP99ms  float64 `json:"interval_p99_ms"`
	// Scenario 2: IdealDrain is (backlog−1)/rate; Drain is first to last
	// delivery; LastLate is Drain − IdealDrain (negative: done early,
	// i.e. faster than the rate).
	IdealDrainS float64 `json:"ideal_drain_s"`
	DrainS      float64 `json:"drain_s"`
	LastLateS   float64 `json:"last_task_late_s"`
	// InOrderPct is the share of consecutive deliveries whose enqueue
	// numbers increase; MaxDisplacement is the largest |delivery
	// position − enqueue position|.
	InOrderPct      float64 `json:"in_order_pct"`
	MaxDisplacement int     `json:"max_displacement"`
	// RedisCmdsPerTask is Redis's total_commands_processed over the run
	// divided by tasks delivered: everything the contender's processes
	// sent (dequeues, scripts, retries, heartbeats).
	RedisCmdsPerTask float64 `json:"redis_cmds_per_task"`
	// LateSkips (shaper only; -1 otherwise) counts slots wasted because a
	// worker woke more than its late tolerance after its slot (CPU
	// starvation): shaper gives the slot up rather than bunch releases.
	LateSkips float64 `json:"late_skips"`
	WallS     float64 `json:"wall_s"`
	Error     string  `json:"error,omitempty"`
}

func (e *env) hosting(id string) string {
	switch {
	case id == Shaper && e.opts.ShaperMode == ModeDispatchers:
		return "separate Dispatchers in one process"
	case id == Shaper:
		return "`shaper` OS processes"
	default:
		return "asynq servers in one process"
	}
}

func (e *env) fidelity(ctx context.Context, id string, p int) FidelityRow {
	o := e.opts
	row := FidelityRow{Contender: contenderNames[id], Processes: p, Hosting: e.hosting(id), Rate: o.Rate,
		Workers: o.Workers, Backlog: o.Backlog, IdealDrainS: round(float64(o.Backlog-1)/float64(o.Rate), 2), LateSkips: -1}
	sink := testsink.New()
	defer sink.Close()
	prefix := e.prefix(id)
	if err := e.enqueueBacklog(ctx, id, prefix, o.Backlog); err != nil {
		row.Error = err.Error()
		return row
	}
	cmds0 := e.commandsProcessed(ctx)
	start := time.Now()
	var f fleet
	var err error
	if id == Shaper {
		f, err = e.startShaper(ctx, prefix, p, sink.URL())
	} else {
		f, err = e.startAsynq(id, prefix, p, sink.URL())
	}
	if err != nil {
		row.Error = err.Error()
		return row
	}
	limit := o.RunLimit
	if limit == 0 {
		limit = time.Duration(2.5*float64(o.Backlog)/float64(o.Rate)*float64(time.Second)) + 10*time.Second
	}
	if burstOne(id) {
		limit = min(limit, o.BurstOneLimit)
	}
	row.Complete = pollUntil(ctx, start.Add(limit), 50*time.Millisecond, func() bool {
		return sink.DistinctOK() >= o.Backlog
	})
	cmds1 := e.commandsProcessed(ctx)
	row.WallS = round(time.Since(start).Seconds(), 2)
	if sf, ok := f.(*shaperFleet); ok {
		row.LateSkips = sf.counter(ctx, "shaper_shaping_late_skips_total")
	}
	if err := f.stop(ctx); err != nil {
		row.Error = err.Error()
	}
	fillFidelity(&row, sink.OK(), o.Rate)
	if row.Delivered > 0 {
		row.RedisCmdsPerTask = round(float64(cmds1-cmds0)/float64(row.Delivered), 1)
	}
	return row
}

func distinct(hs []testsink.Hit) int {
	seen := map[string]bool{}
	for _, h := range hs {
		seen[h.Payload] = true
	}
	return len(seen)
}

// fillFidelity computes the timing and order columns from the sink's hits.
func fillFidelity(row *FidelityRow, hits []testsink.Hit, rate int) {
	sort.SliceStable(hits, func(i, j int) bool { return hits[i].At.Before(hits[j].At) })
	row.Releases = len(hits)
	if len(hits) == 0 {
		return
	}
	ts := testsink.Times(hits)
	row.AchievedRate = round(testsink.Rate(ts), 2)
	row.MaxIn1s = testsink.MaxInWindow(ts, time.Second)
	var rel []time.Time
	for _, h := range hits {
		if !h.Wake.IsZero() {
			rel = append(rel, h.Wake)
		}
	}
	row.MaxIn1sRelease = testsink.MaxInWindow(rel, time.Second)
	var iv []float64
	for i := 1; i < len(ts); i++ {
		iv = append(iv, ms(ts[i].Sub(ts[i-1])))
	}
	row.IntervalP50ms = round(percentile(iv, 0.50), 2)
	row.IntervalP99ms = round(percentile(iv, 0.99), 2)

	// First delivery of each task, in arrival order.
	seen := map[int]bool{}
	var order []int
	var first, last time.Time
	for _, h := range hits {
		n := seqOf(h.Payload)
		if n < 0 || seen[n] {
			continue
		}
		seen[n] = true
		if len(order) == 0 {
			first = h.At
		}
		last = h.At
		order = append(order, n)
	}
	row.Delivered = len(order)
	row.DrainS = round(last.Sub(first).Seconds(), 2)
	row.LastLateS = round(row.DrainS-row.IdealDrainS, 2)
	inOrder := 0
	for i := 1; i < len(order); i++ {
		if order[i] > order[i-1] {
			inOrder++
		}
	}
	if len(order) > 1 {
		row.InOrderPct = round(100*float64(inOrder)/float64(len(order)-1), 1)
	}
	// Displacement against the order the delivered tasks were enqueued in.
	rank := slices.Clone(order)
	slices.Sort(rank)
	pos := make(map[int]int, len(rank))
	for i, n := range rank {
		pos[n] = i
	}
	for i, n := range order {
		row.MaxDisplacement = max(row.MaxDisplacement, abs(i-pos[n]))
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func fidelityTables(rows []FidelityRow) (fid, def string) {
	t := table{head: []string{"contender", "P", "hosting", "delivered", "achieved rate (/s)", "max in any 1 s at the sink",
		"max in any 1 s at release", "interval p50 (ms)", "interval p99 (ms)", "Redis cmds/task", "slots wasted (late wake-ups)"},
		align: "lrlrrrrrrrr"}
	d := table{head: []string{"contender", "P", "ideal drain (s)", "actual drain (s)", "last task late by (s)",
		"in FIFO order (%)", "max displacement"}, align: "lrrrrrr"}
	for _, r := range rows {
		if r.Error != "" && r.Delivered == 0 {
			t.add(r.Contender, fmt.Sprint(r.Processes), r.Hosting, "error: "+r.Error, "", "", "", "", "", "", "")
			continue
		}
		del := fmt.Sprintf("%d/%d", r.Delivered, r.Backlog)
		if !r.Complete {
			del += fmt.Sprintf(" (stopped at %.0f s)", r.WallS)
		}
		skips := "–"
		if r.LateSkips >= 0 {
			skips = num(r.LateSkips, 0)
		}
		t.add(r.Contender, fmt.Sprint(r.Processes), r.Hosting, del, num(r.AchievedRate, 1), fmt.Sprint(r.MaxIn1s),
			fmt.Sprint(r.MaxIn1sRelease), num(r.IntervalP50ms, 1), num(r.IntervalP99ms, 1), num(r.RedisCmdsPerTask, 1), skips)
		late := num(r.LastLateS, 1)
		if !r.Complete {
			late = fmt.Sprintf("incomplete: %d of %d in %.0f s", r.Delivered, r.Backlog, r.WallS)
		}
		d.add(r.Contender, fmt.Sprint(r.Processes), num(r.IdealDrainS, 1), num(r.DrainS, 1), late,
			num(r.InOrderPct, 1), fmt.Sprint(r.MaxDisplacement))
	}
	return t.String(), d.String()
}
