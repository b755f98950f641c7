package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shaper-io/shaper/internal/testsink"
	"github.com/shaper-io/shaper/queue"
)

// RoundFairScale is the release-path round that measures fair share at
// scale: many tenants with backlogs at a high rate across processes.
const RoundFairScale = "fairscale"

// FairScaleOptions size round "fairscale". Zero fields take the defaults.
type FairScaleOptions struct {
	Procs int // shaper processes in both runs; default 3
	// Run "equal": Tenants tenants of equal weight at Rate, Tasks each.
	Rate    int // default 1000
	Tenants int // default 10
	Tasks   int // per tenant; default 500 (5 s of its share; quick 250)
	// Run "weighted": WTenants tenants at WRate in three equal groups of
	// weight 3, 2 and 1, each with WTasks tasks per unit of its weight.
	WRate    int // default 300
	WTenants int // default 30; a multiple of 3
	WTasks   int // default 30 (6 s of backlog; quick 25, 5 s)
	// NewcomerAfter is when, after the backlog's enqueue began, one more
	// tenant enqueues one task in run "equal"; default 2s.
	NewcomerAfter time.Duration
}

func (f FairScaleOptions) withDefaults(quick bool) FairScaleOptions {
	pick := func(full, q int) int {
		if quick {
			return q
		}
		return full
	}
	f.Procs, f.Rate, f.Tenants = cmp.Or(f.Procs, 3), cmp.Or(f.Rate, 1000), cmp.Or(f.Tenants, 10)
	f.Tasks, f.WRate, f.WTenants = cmp.Or(f.Tasks, pick(500, 250)), cmp.Or(f.WRate, 300), cmp.Or(f.WTenants, 30)
	f.WTasks, f.NewcomerAfter = cmp.Or(f.WTasks, pick(30, 25)), cmp.Or(f.NewcomerAfter, 2*time.Second)
	return f
}

func (f FairScaleOptions) validate() error {
	if f.Procs < 1 || f.Rate < 1 || f.WRate < 1 || f.Tenants < 2 || f.Tasks < 1 || f.WTasks < 1 {
		return fmt.Errorf("bench: fairscale round needs processes, rates, tasks >= 1 and >= 2 tenants, got %+v", f)
	}
	if f.WTenants < 3 || f.WTenants%3 != 0 {
		return fmt.Errorf("bench: fairscale round's weighted tenants must be a multiple of 3, got %d", f.WTenants)
	}
	return nil
}

// FairScaleRow is one run of round "fairscale": Processes shaper
// processes, one downstream at Rate with fair share by tenant (and the
// run's weights), the default config otherwise. Every tenant enqueues its
// backlog side by side through the producer the daemon builds from the
// same config (internal/plan), all at once, after the processes serve.
// Times are release times (X-Shaper-Released).
type FairScaleRow struct {
	Mode      string `json:"mode"`
	Fairness  string `json:"fairness"` // the YAML value
	Rate      int    `json:"rate_per_s"`
	Processes int    `json:"processes"`
	Workers   int    `json:"workers_per_process"`
	Tenants   int    `json:"tenants"`
	Weights   string `json:"weights"` // e.g. "10 × 1"
	Tasks     int    `json:"tasks"`   // the backlog, all tenants, the newcomer's not included
	// EnqueueS is from the first enqueue of the backlog to the last.
	EnqueueS   float64 `json:"enqueue_s"`
	Delivered  int     `json:"delivered"`
	Duplicates int     `json:"duplicates"`
	Complete   bool    `json:"complete"`
	// Achieved is releases per second from the first second after the
	// first release to the last release (there is a backlog throughout);
	// KeepUp is Achieved / Rate; MaxIn1s the most releases in any 1 s.
	Achieved float64 `json:"achieved_per_s"`
	KeepUp   float64 `json:"keep_up"`
	MaxIn1s  int     `json:"max_in_any_1s_at_release"`
	// BusyS is how long every tenant of the backlog had work (the latest
	// first enqueue to the earliest last release); Jain is Jain's index of
	// their releases in it per unit of weight; ShareMin and ShareMax are
	// the smallest and largest tenant's share over its weighted fair share
	// (1: exactly its share).
	BusyS    float64 `json:"all_had_work_s"`
	Jain     float64 `json:"jain"`
	ShareMin float64 `json:"share_vs_fair_min"`
	ShareMax float64 `json:"share_vs_fair_max"`
	// NewcomerS is the newcomer's first release after its enqueue (0: no
	// newcomer in this run, −1: never released); NewcomerTargetS is 2
	// intervals + 100 ms.
	NewcomerS       float64 `json:"newcomer_first_release_s"`
	NewcomerTargetS float64 `json:"newcomer_target_s"`
	// NewcomerEnqueueS is how long the newcomer's Enqueue call took, the
	// part of NewcomerS before its task existed in Redis (the producer's
	// admission and park round trips, on the loaded machine).
	NewcomerEnqueueS float64 `json:"newcomer_enqueue_s"`
	// NewcomerSlotS is the newcomer's slot after its enqueue (where its
	// wait was decided: the take and its process's lane), and
	// NewcomerBehind how many other tasks had slots between its enqueue
	// and its own: the releases it waited behind.
	NewcomerSlotS  float64 `json:"newcomer_slot_s"`
	NewcomerBehind int     `json:"newcomer_behind"`
	// Commands are the INFO commandstats delta from just before the
	// processes start to the last delivery (start-up, enqueues, releases).
	Commands    int64   `json:"redis_commands"`
	CmdsPerTask float64 `json:"commands_per_task"`
	Top         string  `json:"top_commands"`
	RunS        float64 `json:"run_s"`
	Error       string  `json:"error,omitempty"`
}

// fairScaleRun is one run's load.
type fairScaleRun struct {
	mode     string
	rate     int
	tenants  []string
	weights  map[string]float64
	tasks    map[string]int
	newcomer time.Duration // 0: none
}

// newcomerTenant is the tenant that arrives late with one task.
const newcomerTenant = "newcomer"

func (f FairScaleOptions) runs() []fairScaleRun {
	eq := fairScaleRun{mode: "equal", rate: f.Rate, weights: map[string]float64{}, tasks: map[string]int{}, newcomer: f.NewcomerAfter}
	for i := range f.Tenants {
		k := fmt.Sprintf("t%02d", i)
		eq.tenants, eq.weights[k], eq.tasks[k] = append(eq.tenants, k), 1, f.Tasks
	}
	wt := fairScaleRun{mode: "weighted 3:2:1", rate: f.WRate, weights: map[string]float64{}, tasks: map[string]int{}}
	for i := range f.WTenants {
		k, w := fmt.Sprintf("t%02d", i), 3-i*3/f.WTenants
		wt.tenants, wt.weights[k], wt.tasks[k] = append(wt.tenants, k), float64(w), w*f.WTasks
	}
	return []fairScaleRun{eq, wt}
}

// fairness is the run's YAML fairness value: weights other than 1 only.
func (r fairScaleRun) fairness() string {
	var ws []string
	for _, k := range r.tenants {
		if w := r.weights[k]; w != 1 {
			ws = append(ws, fmt.Sprintf("%s: %g", k, w))
		}
	}
	if len(ws) == 0 {
		return "{key: tenant}"
	}
	return "{key: tenant, weights: {" + strings.Join(ws, ", ") + "}}"
}

// weightsLabel summarises the weights, e.g. "10 × 3, 10 × 2, 10 × 1".
func (r fairScaleRun) weightsLabel() string {
	n := map[float64]int{}
	var ws []float64
	for _, k := range r.tenants {
		if n[r.weights[k]]++; n[r.weights[k]] == 1 {
			ws = append(ws, r.weights[k])
		}
	}
	slices.SortFunc(ws, func(a, b float64) int { return cmp.Compare(b, a) })
	var parts []string
	for _, w := range ws {
		parts = append(parts, fmt.Sprintf("%d × %g", n[w], w))
	}
	return strings.Join(parts, ", ")
}

func (r fairScaleRun) total() int {
	n := 0
	for _, k := range r.tenants {
		n += r.tasks[k]
	}
	return n
}

func (e *env) fairScale(ctx context.Context) []FairScaleRow {
	fo := e.opts.FairScale
	var rows []FairScaleRow
	for _, r := range fo.runs() {
		e.logf("fairscale: %s, %d processes at %d/s, %d tenants (%s), %d tasks ...", r.mode, fo.Procs, r.rate, len(r.tenants), r.weightsLabel(), r.total())
		row := e.fairScaleRun(ctx, r)
		e.logf("fairscale: %s: keep-up %.4f (%.1f/s), max %d in 1 s; Jain %.4f over %.1f s, shares %.3f..%.3f of fair; newcomer %.3f s (enqueue call %.3f s, slot %.3f s, behind %d); %.1f commands per task; enqueue %.2f s; %d/%d delivered, %d duplicates%s",
			r.mode, row.KeepUp, row.Achieved, row.MaxIn1s, row.Jain, row.BusyS, row.ShareMin, row.ShareMax, row.NewcomerS,
			row.NewcomerEnqueueS, row.NewcomerSlotS, row.NewcomerBehind, row.CmdsPerTask, row.EnqueueS, row.Delivered, row.Tasks, row.Duplicates, errSuffix(row.Error))
		rows = append(rows, row)
		if ctx.Err() != nil {
			break
		}
	}
	return rows
}

// fairScaleRun runs one load: the processes, every backlog side by side,
// the newcomer; then it waits for every task's release.
func (e *env) fairScaleRun(ctx context.Context, r fairScaleRun) FairScaleRow {
	fo := e.opts.FairScale
	row := FairScaleRow{Mode: r.mode, Fairness: r.fairness(), Rate: r.rate, Processes: fo.Procs, Tenants: len(r.tenants),
		Weights: r.weightsLabel(), Tasks: r.total()}
	n := row.Tasks
	if r.newcomer > 0 {
		n++
	}
	sink := testsink.New()
	defer sink.Close()
	prefix := e.prefix("fairscale")
	cfg := e.shaperYAML(prefix, httpDownstream(downstream, r.rate, 0, sink.URL(), "fairness: "+row.Fairness))
	p, err := planProducer(e, cfg)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	defer p.Close()
	var enq map[string][]time.Time
	var stop func(context.Context) error
	limit := 2*time.Duration(float64(n)/float64(r.rate)*float64(time.Second)) + 30*time.Second
	start := time.Now()
	d, err := e.countCommands(ctx, func() error {
		f, err := e.launch(ctx, prefix, fo.Procs, cfg, time.Minute)
		if err != nil {
			return err
		}
		stop, row.Workers = f.stop, f.workers()
		var took time.Duration
		enq, took, err = enqueueSideBySide(ctx, p, r)
		row.NewcomerEnqueueS = round(took.Seconds(), 3)
		if err != nil {
			return err
		}
		err = awaitDelivered(ctx, sink, n, start, limit)
		row.Complete = err == nil
		return err
	})
	row.RunS = round(time.Since(start).Seconds(), 1)
	stopInto(ctx, stop, &err)
	keepFirst(&row.Error, err)
	row.Commands, row.Top = d.Total(), topCommands(d, 8)
	fillFairScale(&row, r, enq, sink.OK())
	if row.Delivered > 0 {
		row.CmdsPerTask = round(float64(row.Commands)/float64(row.Delivered), 1)
	}
	return row
}

// enqueueSideBySide enqueues every tenant's backlog, one goroutine per
// tenant, and the newcomer's one task r.newcomer after they began; it
// returns when each enqueue began, by tenant and sequence number, and how
// long the newcomer's Enqueue call took.
func enqueueSideBySide(ctx context.Context, p *queue.Producer, r fairScaleRun) (map[string][]time.Time, time.Duration, error) {
	keys := slices.Clone(r.tenants)
	if r.newcomer > 0 {
		keys = append(keys, newcomerTenant)
	}
	at := make([][]time.Time, len(keys))
	errs := make([]error, len(keys))
	var took time.Duration // the newcomer's call (its goroutine's alone until Wait)
	t0 := time.Now()
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := r.tasks[k]
			if k == newcomerTenant {
				n = 1
				if !sleepCtx(ctx, time.Until(t0.Add(r.newcomer))) {
					errs[i] = ctx.Err()
					return
				}
			}
			at[i], _, errs[i] = enqueueTenant(ctx, p, k, n)
			if k == newcomerTenant {
				took = time.Since(at[i][0])
			}
		}()
	}
	wg.Wait()
	enq := map[string][]time.Time{}
	for i, k := range keys {
		enq[k] = at[i]
	}
	return enq, took, errors.Join(errs...)
}

// fillFairScale computes the measured columns of row from each tenant's
// enqueue times and the sink's hits.
func fillFairScale(row *FairScaleRow, r fairScaleRun, enq map[string][]time.Time, hits []testsink.Hit) {
	var rel map[string][]time.Time
	rel, row.Delivered, row.Duplicates = tenantReleases(enq, hits)
	var first, last time.Time
	for _, k := range r.tenants {
		if len(enq[k]) > 0 {
			lo, hi := spanOf(enq[k])
			if first.IsZero() || lo.Before(first) {
				first = lo
			}
			if hi.After(last) {
				last = hi
			}
		}
	}
	if !first.IsZero() {
		row.EnqueueS = round(last.Sub(first).Seconds(), 2)
	}
	all := releaseTimes(hits)
	row.Achieved = round(keepUpRate(all, time.Second), 1)
	row.KeepUp = round(row.Achieved/float64(r.rate), 4)
	row.MaxIn1s = testsink.MaxInWindow(all, time.Second)
	if r.newcomer > 0 {
		row.NewcomerTargetS = round(2/float64(r.rate)+0.1, 3)
		row.NewcomerS = -1
		if w := taskWaits(enq[newcomerTenant], rel[newcomerTenant]); len(w) > 0 {
			row.NewcomerS = round(w[0], 3)
		}
		row.NewcomerSlotS, row.NewcomerBehind = newcomerSlot(enq[newcomerTenant], hits)
	}
	sh := busySharesOf(r.tenants, enq, rel, r.weights)
	row.BusyS, row.Jain = round(sh.span.Seconds(), 2), round(sh.jain, 4)
	if sh.span <= 0 {
		return
	}
	var sum float64
	for _, k := range r.tenants {
		sum += r.weights[k]
	}
	for i, k := range r.tenants {
		x := sh.share[k] / (r.weights[k] / sum)
		if i == 0 || x < row.ShareMin {
			row.ShareMin = x
		}
		row.ShareMax = max(row.ShareMax, x)
	}
	row.ShareMin, row.ShareMax = round(row.ShareMin, 3), round(row.ShareMax, 3)
}

// fairScaleMarkdown renders round "fairscale", "" if it did not run.
func (r *ReleaseReport) fairScaleMarkdown(fo FairScaleOptions) string {
	if len(r.FairScale) == 0 {
		return ""
	}
	t := table{head: []string{"run", "rate", "P", "workers per process", "tenants (count × weight)", "delivered", "enqueue took",
		"keep-up (achieved/rate)", "max in any 1 s", "all had work", "Jain's index (by weight)", "share / fair share min–max",
		"newcomer: first release (target)", "commands per task", "top commands"}, align: "lrrrlrrrrrrrrrl"}
	for _, x := range r.FairScale {
		del := fmt.Sprintf("%d/%d", x.Delivered, x.Tasks)
		if x.NewcomerTargetS > 0 {
			del = fmt.Sprintf("%d/%d", x.Delivered, x.Tasks+1)
		}
		del += fmt.Sprintf(", %d duplicates", x.Duplicates)
		if x.Error != "" {
			del += " (" + x.Error + ")"
		}
		nc := "–"
		if x.NewcomerTargetS > 0 {
			nc = fmt.Sprintf("never (%s ms)", num(x.NewcomerTargetS*1000, 0))
			if x.NewcomerS >= 0 {
				nc = fmt.Sprintf("%s ms (%s ms; enqueue call %s ms)", num(x.NewcomerS*1000, 0), num(x.NewcomerTargetS*1000, 0), num(x.NewcomerEnqueueS*1000, 0))
			}
		}
		t.add(x.Mode, fmt.Sprintf("%d/s", x.Rate), fmt.Sprint(x.Processes), fmt.Sprint(x.Workers), x.Weights, del,
			num(x.EnqueueS, 2)+" s", fmt.Sprintf("%s%% (%s/s)", num(x.KeepUp*100, 2), num(x.Achieved, 1)),
			fmt.Sprintf("%d (limit %d)", x.MaxIn1s, x.Rate+1), num(x.BusyS, 2)+" s", num(x.Jain, 4),
			fmt.Sprintf("%s–%s", num(x.ShareMin, 3), num(x.ShareMax, 3)), nc, num(x.CmdsPerTask, 1), "`"+x.Top+"`")
	}
	return fmt.Sprintf("#### 7g. Fair share at scale (%d processes, default workers; every tenant's backlog enqueued side by side once the processes serve; in run \"equal\" a newcomer enqueues one task %s after the backlog's enqueue began)\n\n%s\n",
		fo.Procs, fo.NewcomerAfter, t.String())
}

// newcomerSlot is the newcomer's slot after its enqueue (s) and how many
// other tasks had slots between the two (0, 0 when it has none).
func newcomerSlot(enq []time.Time, hits []testsink.Hit) (float64, int) {
	if len(enq) == 0 {
		return 0, 0
	}
	var slot time.Time
	for _, h := range hits {
		var t tenantTask
		if json.Unmarshal([]byte(h.Payload), &t) == nil && t.T == newcomerTenant {
			slot = h.Slot
		}
	}
	if slot.IsZero() {
		return 0, 0
	}
	n := 0
	for _, h := range hits {
		if h.Slot.After(enq[0]) && h.Slot.Before(slot) {
			n++
		}
	}
	return round(slot.Sub(enq[0]).Seconds(), 3), n
}
