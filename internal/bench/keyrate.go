package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/shaper-io/shaper/internal/testsink"
	"github.com/shaper-io/shaper/queue"
)

// RoundKeyRate is the release-path round that measures a per-key ceiling
// (fairness key_rate) at scale: many tenants with a few tasks each, at a
// high downstream rate across processes.
const RoundKeyRate = "keyrate"

// KeyRateOptions size round "keyrate". Zero fields take the defaults.
type KeyRateOptions struct {
	Procs   int // shaper processes; default 3
	Rate    int // the downstream's rate per second; default 1000
	KeyRate int // each tenant's ceiling per second (fairness key_rate); default 2
	Tenants int // default 10,000 (quick 2,000)
	Tasks   int // per tenant; default 6 (60,000 tasks, about 60 s at 1000/s)
	// Enqueuers are the goroutines that enqueue, each a share of the
	// tenants, every tenant's tasks in order; default 32.
	Enqueuers int
	// Control also runs the same load with `fairness: {key: tenant}`
	// alone (no key_rate), after the key_rate run, for comparison.
	Control bool
}

func (k KeyRateOptions) withDefaults(quick bool) KeyRateOptions {
	tenants := 10_000
	if quick {
		tenants = 2_000
	}
	k.Procs, k.Rate, k.KeyRate = cmp.Or(k.Procs, 3), cmp.Or(k.Rate, 1000), cmp.Or(k.KeyRate, 2)
	k.Tenants, k.Tasks, k.Enqueuers = cmp.Or(k.Tenants, tenants), cmp.Or(k.Tasks, 6), cmp.Or(k.Enqueuers, 32)
	return k
}

func (k KeyRateOptions) validate() error {
	if k.Procs < 1 || k.Rate < 1 || k.KeyRate < 1 || k.Tenants < 2 || k.Tasks < 2 || k.Enqueuers < 1 {
		return fmt.Errorf("bench: keyrate round needs processes, rates and enqueuers >= 1, >= 2 tenants and >= 2 tasks each, got %+v", k)
	}
	if k.KeyRate > k.Rate {
		return fmt.Errorf("bench: keyrate round's key rate %d/s is above the downstream's rate %d/s", k.KeyRate, k.Rate)
	}
	return nil
}

// KeyRateRow is round "keyrate": Processes shaper processes, one
// downstream at Rate with `fairness: {key: tenant, key_rate: KeyRate/s}`
// and the default config otherwise. Tenants tenants enqueue Tasks tasks
// each, side by side (Enqueuers goroutines, each a share of the tenants,
// a tenant's tasks in order), through the producer the daemon builds from
// the same config (internal/plan), once the processes serve. Times are
// release times (X-Shaper-Released).
type KeyRateRow struct {
	Fairness  string `json:"fairness"` // the YAML value
	Rate      int    `json:"rate_per_s"`
	KeyRate   int    `json:"key_rate_per_s"` // 0: the control run, no key_rate
	Processes int    `json:"processes"`
	Workers   int    `json:"workers_per_process"`
	Tenants   int    `json:"tenants"`
	TasksEach int    `json:"tasks_per_tenant"`
	Tasks     int    `json:"tasks"`
	// EnqueueS is from the first enqueue to the last; EnqueuePerS the
	// enqueues per second over it.
	EnqueueS    float64 `json:"enqueue_s"`
	EnqueuePerS float64 `json:"enqueue_per_s"`
	Delivered   int     `json:"delivered"`
	Duplicates  int     `json:"duplicates"`
	Complete    bool    `json:"complete"`
	// KeyMaxIn1s is the most releases of any one tenant in any sliding
	// 1 s (the bound is KeyRate + 1); KeysOver counts the tenants above
	// that bound; KeyMinGapS is the closest two releases of one tenant
	// (a key's slots are spaced 1/KeyRate, stretched by the late
	// tolerance).
	KeyMaxIn1s int     `json:"key_max_in_any_1s"`
	KeysOver   int     `json:"tenants_over_bound"`
	KeyMinGapS float64 `json:"key_min_gap_s"`
	// Achieved is releases per second from the first second after the
	// first release to the last release (there is a backlog throughout);
	// KeepUp is Achieved / Rate; DrainS is first to last release and
	// IdealDrainS (Tasks − 1) / Rate; MaxIn1s the most releases in any
	// 1 s (the bound is Rate + 1).
	Achieved    float64 `json:"achieved_per_s"`
	KeepUp      float64 `json:"keep_up"`
	DrainS      float64 `json:"drain_s"`
	IdealDrainS float64 `json:"ideal_drain_s"`
	MaxIn1s     int     `json:"max_in_any_1s_at_release"`
	// EnqueuingPerS is releases per second from the first second after
	// the first release to the last enqueue, AfterPerS from the last
	// enqueue to the last release (the enqueue competes for the CPU and
	// Redis); PerSecond counts the releases in each whole second from the
	// first release.
	EnqueuingPerS float64 `json:"releases_per_s_while_enqueuing"`
	AfterPerS     float64 `json:"releases_per_s_after_enqueue"`
	PerSecond     []int   `json:"releases_per_second"`
	// A tenant's drain time is from its first enqueue to its last
	// release; TenantP50S and TenantP99S are over the tenants.
	// LeastAloneS is the least for a tenant alone, (TasksEach − 1) /
	// KeyRate; LeastMedianS the least possible median under the
	// downstream's rate, half the tenants' tasks / Rate (the other half
	// done after them).
	TenantP50S   float64 `json:"tenant_drain_p50_s"`
	TenantP99S   float64 `json:"tenant_drain_p99_s"`
	LeastAloneS  float64 `json:"least_alone_s"`
	LeastMedianS float64 `json:"least_median_s"`
	// RedisWork is the INFO commandstats delta from just before the
	// processes start to the last delivery (start-up, enqueues, releases).
	RedisWork
	RunS  float64 `json:"run_s"`
	Error string  `json:"error,omitempty"`
}

func (k KeyRateOptions) tenants() []string {
	ts := make([]string, k.Tenants)
	for i := range ts {
		ts[i] = fmt.Sprintf("k%05d", i)
	}
	return ts
}

func (e *env) keyRate(ctx context.Context) []KeyRateRow {
	k := e.opts.KeyRate
	runs := []int{k.KeyRate}
	if k.Control {
		runs = append(runs, 0)
	}
	var rows []KeyRateRow
	for _, kr := range runs {
		e.logf("keyrate: %d processes at %d/s, key_rate %d/s (0: none), %d tenants × %d tasks ...", k.Procs, k.Rate, kr, k.Tenants, k.Tasks)
		row := e.keyRateRun(ctx, kr)
		e.logf("keyrate: key_rate %d/s: most of one tenant in 1 s %d (%d tenants over key_rate+1, closest two %.3f s); keep-up %.4f (%.1f/s; %.1f/s while enqueuing, %.1f/s after), max %d in 1 s; tenant drain p50 %.1f s (least %.1f s alone, %.1f s as the median); %.1f commands per task; enqueue %.2f s; %d/%d delivered, %d duplicates%s",
			kr, row.KeyMaxIn1s, row.KeysOver, row.KeyMinGapS, row.KeepUp, row.Achieved, row.EnqueuingPerS, row.AfterPerS, row.MaxIn1s, row.TenantP50S,
			row.LeastAloneS, row.LeastMedianS, row.CmdsPerTask, row.EnqueueS, row.Delivered, row.Tasks, row.Duplicates, errSuffix(row.Error))
		rows = append(rows, row)
		if ctx.Err() != nil {
			break
		}
	}
	return rows
}

// keyRateRun starts the processes, enqueues every tenant's tasks side by
// side and waits for every task's release; keyRate 0 is the control run
// (fair share, no key_rate).
func (e *env) keyRateRun(ctx context.Context, keyRate int) KeyRateRow {
	k := e.opts.KeyRate
	row := KeyRateRow{Fairness: "{key: tenant}", Rate: k.Rate, KeyRate: keyRate,
		Processes: k.Procs, Tenants: k.Tenants, TasksEach: k.Tasks, Tasks: k.Tenants * k.Tasks}
	if keyRate > 0 {
		row.Fairness = fmt.Sprintf("{key: tenant, key_rate: %d/s}", keyRate)
	}
	sink := testsink.New()
	defer sink.Close()
	prefix := e.prefix("keyrate")
	cfg := e.shaperYAML(prefix, httpDownstream(downstream, k.Rate, 0, sink.URL(), "fairness: "+row.Fairness))
	p, err := planProducer(e, cfg)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	defer p.Close()
	tenants := k.tenants()
	var enq map[string][]time.Time
	var stop func(context.Context) error
	limit := 2*time.Duration(float64(row.Tasks)/float64(k.Rate)*float64(time.Second)) + 30*time.Second
	start := time.Now()
	d, err := e.countCommands(ctx, func() error {
		f, err := e.launch(ctx, prefix, k.Procs, cfg, time.Minute)
		if err != nil {
			return err
		}
		stop, row.Workers = f.stop, f.workers()
		if enq, err = enqueueShared(ctx, p, tenants, k.Tasks, k.Enqueuers); err != nil {
			return err
		}
		err = awaitDelivered(ctx, sink, row.Tasks, start, limit)
		row.Complete = err == nil
		return err
	})
	row.RunS = round(time.Since(start).Seconds(), 1)
	stopInto(ctx, stop, &err)
	keepFirst(&row.Error, err)
	fillKeyRate(&row, tenants, enq, sink.OK())
	row.RedisWork = redisWork(d, row.Delivered)
	return row
}

// enqueueShared enqueues n tasks of every tenant from g goroutines, each
// taking every g-th tenant and enqueuing its tasks in order; it returns
// when each enqueue began, by tenant and sequence number.
func enqueueShared(ctx context.Context, p *queue.Producer, tenants []string, n, g int) (map[string][]time.Time, error) {
	at := make([][]time.Time, len(tenants))
	errs := make([]error, g)
	var wg sync.WaitGroup
	for w := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(tenants) && errs[w] == nil; i += g {
				at[i], _, errs[w] = enqueueTenant(ctx, p, tenants[i], n)
			}
		}()
	}
	wg.Wait()
	enq := make(map[string][]time.Time, len(tenants))
	for i, k := range tenants {
		enq[k] = at[i]
	}
	return enq, errors.Join(errs...)
}

// fillKeyRate computes the measured columns of row from each tenant's
// enqueue times and the sink's hits.
func fillKeyRate(row *KeyRateRow, tenants []string, enq map[string][]time.Time, hits []testsink.Hit) {
	var rel map[string][]time.Time
	rel, row.Delivered, row.Duplicates = tenantReleases(enq, hits)
	var first, last time.Time
	for _, k := range tenants {
		lo, hi := spanOf(enq[k])
		if !lo.IsZero() && (first.IsZero() || lo.Before(first)) {
			first = lo
		}
		if hi.After(last) {
			last = hi
		}
	}
	if !first.IsZero() {
		row.EnqueueS = round(last.Sub(first).Seconds(), 2)
		if s := last.Sub(first).Seconds(); s > 0 {
			row.EnqueuePerS = round(float64(row.Tasks)/s, 0)
		}
	}
	all := releaseTimes(hits)
	row.Achieved = round(keepUpRate(all, time.Second), 1)
	row.KeepUp = round(row.Achieved/float64(row.Rate), 4)
	row.MaxIn1s = testsink.MaxInWindow(all, time.Second)
	if len(all) > 1 {
		row.DrainS = round(all[len(all)-1].Sub(all[0]).Seconds(), 2)
	}
	row.IdealDrainS = round(float64(row.Tasks-1)/float64(row.Rate), 2)
	if len(all) > 1 && !last.IsZero() {
		t1 := all[0].Add(time.Second)
		var during, after []time.Time
		for _, t := range all {
			switch {
			case t.After(last):
				after = append(after, t)
			case !t.Before(t1):
				during = append(during, t)
			}
		}
		if len(during) > 1 {
			row.EnqueuingPerS = round(float64(len(during))/last.Sub(t1).Seconds(), 1)
		}
		if len(after) > 1 {
			row.AfterPerS = round(float64(len(after))/all[len(all)-1].Sub(last).Seconds(), 1)
		}
	}
	row.PerSecond = nil
	for _, t := range all {
		i := int(t.Sub(all[0]) / time.Second)
		for len(row.PerSecond) <= i {
			row.PerSecond = append(row.PerSecond, 0)
		}
		row.PerSecond[i]++
	}
	if row.KeyRate > 0 {
		row.LeastAloneS = round(float64(row.TasksEach-1)/float64(row.KeyRate), 2)
	}
	row.LeastMedianS = round(float64((row.Tenants+1)/2*row.TasksEach)/float64(row.Rate), 2)
	var drains []float64
	minGap := time.Duration(-1)
	for _, k := range tenants {
		var ts []time.Time
		for _, t := range rel[k] {
			if !t.IsZero() {
				ts = append(ts, t)
			}
		}
		if len(ts) == 0 {
			continue
		}
		slices.SortFunc(ts, time.Time.Compare)
		n := testsink.MaxInWindow(ts, time.Second)
		row.KeyMaxIn1s = max(row.KeyMaxIn1s, n)
		if row.KeyRate > 0 && n > row.KeyRate+1 {
			row.KeysOver++
		}
		for i := 1; i < len(ts); i++ {
			if g := ts[i].Sub(ts[i-1]); minGap < 0 || g < minGap {
				minGap = g
			}
		}
		if len(ts) == len(enq[k]) && len(enq[k]) > 0 {
			drains = append(drains, ts[len(ts)-1].Sub(enq[k][0]).Seconds())
		}
	}
	if minGap >= 0 {
		row.KeyMinGapS = round(minGap.Seconds(), 4)
	}
	if len(drains) > 0 {
		row.TenantP50S, row.TenantP99S = round(percentile(drains, 0.5), 2), round(percentile(drains, 0.99), 2)
	}
}

// keyRateMarkdown renders round "keyrate", "" if it did not run.
func (r *ReleaseReport) keyRateMarkdown() string {
	if len(r.KeyRate) == 0 {
		return ""
	}
	t := table{head: []string{"fairness", "P", "workers per process", "tenants × tasks", "delivered", "enqueue took",
		"most of one tenant in any 1 s (bound)", "tenants over the bound", "closest two of one tenant", "keep-up (achieved/rate)",
		"releases/s while enqueuing / after", "max in any 1 s (bound)", "drain (ideal)", "tenant drain p50 / p99",
		"least possible: alone / median", "commands per task", "scripts per task", "top commands"}, align: "lrrrrrrrrrrrrrrrrl"}
	for _, x := range r.KeyRate {
		del := fmt.Sprintf("%s/%s, %d duplicates", inum(int64(x.Delivered)), inum(int64(x.Tasks)), x.Duplicates)
		if x.Error != "" {
			del += " (" + x.Error + ")"
		}
		bound, over, alone := "–", "–", "–"
		if x.KeyRate > 0 {
			bound, over, alone = fmt.Sprint(x.KeyRate+1), fmt.Sprint(x.KeysOver), num(x.LeastAloneS, 1)
		}
		t.add("`"+x.Fairness+"`", fmt.Sprint(x.Processes), fmt.Sprint(x.Workers), fmt.Sprintf("%s × %d", inum(int64(x.Tenants)), x.TasksEach), del,
			fmt.Sprintf("%s s (%s/s)", num(x.EnqueueS, 2), num(x.EnqueuePerS, 0)),
			fmt.Sprintf("%d (%s)", x.KeyMaxIn1s, bound), over, num(x.KeyMinGapS*1000, 1)+" ms",
			fmt.Sprintf("%s%% (%s/s)", num(x.KeepUp*100, 2), num(x.Achieved, 1)),
			fmt.Sprintf("%s / %s", num(x.EnqueuingPerS, 1), num(x.AfterPerS, 1)), fmt.Sprintf("%d (%d)", x.MaxIn1s, x.Rate+1),
			fmt.Sprintf("%s s (%s s)", num(x.DrainS, 1), num(x.IdealDrainS, 1)),
			fmt.Sprintf("%s / %s s", num(x.TenantP50S, 1), num(x.TenantP99S, 1)),
			fmt.Sprintf("%s / %s s", alone, num(x.LeastMedianS, 1)),
			num(x.CmdsPerTask, 1), num(x.ScriptsPerTask, 2), "`"+x.Top+"`")
	}
	x := r.KeyRate[0]
	return fmt.Sprintf("#### 7h. key_rate at scale (%d processes at %d/s, key_rate %d/s, default workers; every tenant's tasks enqueued side by side once the processes serve; times by release)\n\n%s\n",
		x.Processes, x.Rate, x.KeyRate, t.String())
}
