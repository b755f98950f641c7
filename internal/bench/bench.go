// Package bench measures shaper against what users would pick instead, in
// one run on one throwaway Redis: asynq's rate-limit recipe (a per-process
// golang.org/x/time/rate limiter in the handler and a RateLimitError that
// IsFailure does not count), go-redis/redis_rate (GCRA) gating asynq
// (reject, return an error, asynq retries), and raw asynq with no limit.
//
// Scenarios (see docs/benchmarks.md, "Contenders", for how to read them):
//
//  1. fidelity: each contender drains a backlog at rate R with P processes
//     into a recording HTTP sink: achieved rate, most releases in any 1 s,
//     inter-release interval p50/p99;
//  2. deferral: on the same runs, how late the last task lands against
//     backlog/R and whether FIFO order holds;
//  3. decisions: decisions/s of every admission script and of redis_rate
//     at 1, 16 and 64 goroutines, and redis-benchmark's EVALSHA rate for
//     the same script and arguments (the ceiling on this machine);
//  4. overhead: shaper with an unthrottled downstream vs raw asynq
//     processing, and admission+enqueue vs asynq.Client.Enqueue;
//  5. memory: bytes per key of each algorithm's state;
//  6. growth: decision latency and memory as keys grow, and sliding logs
//     filled to 10, 100 and 1000 entries;
//  7. release: the release path of real `shaper` processes, in rounds
//     (see release.go): Redis commands per released task next to raw
//     asynq, keep-up and bursts, idle cost by downstream count, a
//     kill -9, a late small tenant's wait with and without fair share,
//     and urgent tasks' latency behind a backlog with priority and FIFO.
//
// cmd/shaperbench is the command; Run is the whole benchmark.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// Scenario names, as the -scenarios flag takes them.
const (
	ScenarioFidelity  = "fidelity" // 1 and 2 (deferral is read off the same runs)
	ScenarioDecisions = "decisions"
	ScenarioOverhead  = "overhead"
	ScenarioMemory    = "memory"
	ScenarioGrowth    = "growth"
	ScenarioRelease   = "release" // rounds: Options.ReleaseRounds
)

// AllScenarios lists the scenarios in run order.
func AllScenarios() []string {
	return []string{ScenarioFidelity, ScenarioDecisions, ScenarioOverhead, ScenarioMemory, ScenarioGrowth, ScenarioRelease}
}

// Shaper hosting modes for the fidelity scenario.
const (
	// ModeProcesses runs real `shaper` OS processes (built from
	// cmd/shaper unless Options.ShaperBin names a binary).
	ModeProcesses = "processes"
	// ModeDispatchers runs separate shaping.Dispatchers, each with its
	// own Redis client, inside the bench process.
	ModeDispatchers = "dispatchers"
)

// Options configure a run. Zero fields take the defaults of Quick or full
// mode (see Defaults).
type Options struct {
	Quick      bool
	Scenarios  []string // nil: all
	Contenders []string // fidelity only; nil: all
	// Fidelity.
	Rate           int           // releases/s; default 50
	Workers        int           // per process; default 20
	Backlog        int           // default 1500 (quick 300)
	Procs          []int         // default {1, 3}
	ShaperMode     string        // ModeProcesses (default) or ModeDispatchers
	ShaperBin      string        // prebuilt shaper binary; "" builds cmd/shaper
	RecipeRetryMax time.Duration // recipe's RetryIn is rand(0..this) whole seconds; default 10s as in asynq's wiki
	RunLimit       time.Duration // per fidelity run; default 2.5×backlog/rate + 10s
	BurstOneLimit  time.Duration // per run of a burst-1 variant; default 15s (quick 10s)
	// Decisions.
	DecisionTime      time.Duration // per limiter, concurrency and round; default 0.25s (quick 0.2s)
	DecisionRounds    int           // interleaved rounds, medians reported; default 3 (quick 1)
	BenchmarkRequests int           // redis-benchmark -n per round (4× with -P 16); default 5,000
	// Overhead.
	OverheadTasks int // backlog per processing round; default 3000 (quick 600)
	Rounds        int // interleaved processing rounds; default 5 (quick 1)
	EnqueueTasks  int // per enqueue measurement; default 2000 (quick 600)
	EnqueueRounds int // interleaved enqueue rounds; default 9 (quick 1)
	// Memory and growth.
	MemKeys int   // scenario 5; default 100,000 (quick 10,000)
	Levels  []int // scenario 6; default 1k, 10k, 100k, 1M (quick 1k, 10k)
	// BigFamilies are the only families run at levels above 100k keys
	// (filling 1M keys takes ~20 s per family); default token_bucket.
	BigFamilies    []string
	EntryBudget    int64 // most sliding-log entries or sub-window fields in Redis at once; default 1M
	LatencySamples int   // decisions timed per level; default 2000 (quick 300)
	// Release path (scenario 7).
	ReleaseRounds []string      // nil: AllRounds
	ReleaseProcs  []int         // keepup and idle process counts; default {1, 3}
	EconomyRates  []int         // default {50, 200, 1000}
	EconomyProcs  int           // default 3
	EconomyDrain  time.Duration // backlog = rate × this; default 10s (quick 5s)
	KeepupRates   []int         // default {50, 200, 1000}
	KeepupDrain   time.Duration // backlog = rate × this; default 10s (quick 5s)
	IdleLevels    []int         // downstream counts; default {1, 100, 500}
	IdleWarmup    time.Duration // default 3s
	IdleWindow    time.Duration // commands counted over this; default 10s (quick 5s)
	KillRate      int           // default 50
	KillProcs     int           // default 3
	KillBacklog   int           // default 1000
	KillAfter     time.Duration // after the first delivery; default 5s
	KillLimit     time.Duration // most to wait after the kill; default 150s
	FairRate      int           // default 50
	FairProcs     int           // default 3
	FairTasksA    int           // tenant A's backlog; default 1000
	FairTasksBC   int           // B's and C's, each; default 100
	FairDelay     time.Duration // from A's first enqueue to B's and C's; default 3s
	// Round "pause"; zero fields take its defaults.
	Pause PauseOptions
	// Round "priority"; zero fields take its defaults.
	Priority PriorityOptions
	// Round "fairscale"; zero fields take its defaults.
	FairScale FairScaleOptions
	// Round "keyrate"; zero fields take its defaults.
	KeyRate KeyRateOptions
	// Round "keycap"; zero fields take its defaults.
	KeyCap KeyCapOptions

	// Progress receives one line per step; nil is silent.
	Progress interface{ Write([]byte) (int, error) }
	// Command is echoed in the report ("how to reproduce").
	Command string
}

// Defaults fills zero fields.
func (o Options) Defaults() Options {
	pick := func(full, quick int) int {
		if o.Quick {
			return quick
		}
		return full
	}
	if len(o.Scenarios) == 0 {
		o.Scenarios = AllScenarios()
	}
	if len(o.Contenders) == 0 {
		o.Contenders = AllContenders()
	}
	if o.Rate == 0 {
		o.Rate = 50
	}
	if o.Workers == 0 {
		o.Workers = 20
	}
	if o.Backlog == 0 {
		o.Backlog = pick(1500, 300)
	}
	if len(o.Procs) == 0 {
		o.Procs = []int{1, 3}
	}
	if o.ShaperMode == "" {
		o.ShaperMode = ModeProcesses
	}
	if o.RecipeRetryMax == 0 {
		o.RecipeRetryMax = 10 * time.Second
	}
	if o.BurstOneLimit == 0 {
		o.BurstOneLimit = time.Duration(pick(15, 10)) * time.Second
	}
	if o.DecisionTime == 0 {
		o.DecisionTime = time.Duration(pick(250, 200)) * time.Millisecond
	}
	if o.DecisionRounds == 0 {
		o.DecisionRounds = pick(3, 1)
	}
	if o.BenchmarkRequests == 0 {
		o.BenchmarkRequests = 5_000
	}
	if o.OverheadTasks == 0 {
		o.OverheadTasks = pick(3000, 600)
	}
	if o.EnqueueTasks == 0 {
		o.EnqueueTasks = pick(2000, 600)
	}
	if o.EnqueueRounds == 0 {
		o.EnqueueRounds = pick(9, 1)
	}
	if o.Rounds == 0 {
		o.Rounds = pick(5, 1)
	}
	if o.MemKeys == 0 {
		o.MemKeys = pick(100_000, 10_000)
	}
	if len(o.Levels) == 0 {
		o.Levels = []int{1_000, 10_000, 100_000, 1_000_000}
		if o.Quick {
			o.Levels = []int{1_000, 10_000}
		}
	}
	if o.BigFamilies == nil {
		o.BigFamilies = []string{"token_bucket"}
	}
	if o.EntryBudget == 0 {
		o.EntryBudget = 1_000_000
	}
	if o.LatencySamples == 0 {
		o.LatencySamples = pick(2000, 300)
	}
	return o.releaseDefaults()
}

func (o Options) validate() error {
	for _, s := range o.Scenarios {
		if !slices.Contains(AllScenarios(), s) {
			return fmt.Errorf("bench: unknown scenario %q (want some of %s)", s, strings.Join(AllScenarios(), ","))
		}
	}
	for _, c := range o.Contenders {
		if !slices.Contains(AllContenders(), c) {
			return fmt.Errorf("bench: unknown contender %q (want some of %s)", c, strings.Join(AllContenders(), ","))
		}
	}
	if o.ShaperMode != ModeProcesses && o.ShaperMode != ModeDispatchers {
		return fmt.Errorf("bench: shaper mode must be %q or %q, got %q", ModeProcesses, ModeDispatchers, o.ShaperMode)
	}
	if o.Rate < 1 || o.Workers < 1 || o.Backlog < 2 {
		return fmt.Errorf("bench: rate, workers must be >= 1 and backlog >= 2, got %d, %d, %d", o.Rate, o.Workers, o.Backlog)
	}
	return o.validateRelease()
}

// Report is the whole result; it is what the JSON file holds.
type Report struct {
	Mode       string          `json:"mode"`
	Command    string          `json:"command,omitempty"`
	Started    time.Time       `json:"started"`
	DurationS  float64         `json:"duration_s"`
	Machine    Machine         `json:"machine"`
	ShaperMode string          `json:"shaper_mode"`
	Fidelity   []FidelityRow   `json:"fidelity,omitempty"`
	Decisions  []DecisionRow   `json:"decisions,omitempty"`
	Processing []ProcessingRow `json:"processing,omitempty"`
	Enqueue    []EnqueueRow    `json:"enqueue,omitempty"`
	MemKeys    int             `json:"memory_keys,omitempty"`
	Memory     []GrowthRow     `json:"memory,omitempty"`
	Growth     []GrowthRow     `json:"growth,omitempty"`
	Release    *ReleaseReport  `json:"release,omitempty"`
	Headlines  []string        `json:"headlines,omitempty"`
	opts       Options
}

// Run runs the selected scenarios and returns the report.
func Run(ctx context.Context, opts Options) (*Report, error) {
	o := opts.Defaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	mode := "full"
	if o.Quick {
		mode = "quick"
	}
	rep := &Report{Mode: mode, Command: o.Command, Started: time.Now().UTC().Truncate(time.Second), Machine: machine(),
		ShaperMode: o.ShaperMode, opts: o}
	e, err := newEnv(ctx, o)
	if err != nil {
		return nil, err
	}
	defer e.close()
	e.logf("redis-server on %s (%s mode)", e.addr, mode)
	has := func(s string) bool { return slices.Contains(o.Scenarios, s) }

	if has(ScenarioFidelity) {
		if slices.Contains(o.Contenders, Shaper) && o.ShaperMode == ModeProcesses {
			if e.shaperBin, err = e.buildShaper(ctx); err != nil {
				return nil, err
			}
		}
		if err := e.fidelityRounds(ctx, rep); err != nil {
			return rep, err
		}
	}
	if has(ScenarioDecisions) {
		rep.Decisions = e.decisions(ctx)
	}
	if has(ScenarioOverhead) {
		rep.Processing = e.processing(ctx)
		rep.Enqueue = e.enqueueOverhead(ctx)
	}
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	if has(ScenarioMemory) || has(ScenarioGrowth) {
		e.memoryRounds(ctx, rep, has(ScenarioMemory), has(ScenarioGrowth))
	}
	if has(ScenarioRelease) && ctx.Err() == nil {
		rep.Release = e.release(ctx)
	}
	rep.Headlines = headlines(rep)
	rep.Machine.LoadEnd = loadavg()
	rep.DurationS = round(time.Since(rep.Started).Seconds(), 1)
	return rep, nil
}

// fidelityRounds runs scenario 1, each contender at each process count
// (a burst-one contender at the first only), into rep.Fidelity; it stops
// with ctx's error when ctx ends.
func (e *env) fidelityRounds(ctx context.Context, rep *Report) error {
	o := e.opts
	for i, p := range o.Procs {
		for _, id := range o.Contenders {
			if burstOne(id) && i > 0 {
				continue
			}
			e.logf("fidelity: %s, P=%d, backlog %d at %d/s ...", id, p, o.Backlog, o.Rate)
			row := e.fidelity(ctx, id, p)
			e.logf("fidelity: %s, P=%d: %d/%d delivered, %.1f/s, max %d in 1s, drain %.1fs%s", id, p, row.Delivered,
				row.Backlog, row.AchievedRate, row.MaxIn1s, row.DrainS, errSuffix(row.Error))
			rep.Fidelity = append(rep.Fidelity, row)
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
	return nil
}

// memoryRounds runs scenarios 5 (memory, at MemKeys) and 6 (growth, at
// each level) over one key-scaling pass, into rep.Memory and rep.Growth.
func (e *env) memoryRounds(ctx context.Context, rep *Report, memory, growth bool) {
	o := e.opts
	rep.MemKeys = o.MemKeys
	levels := []int{o.MemKeys}
	if growth {
		levels = slices.Sorted(slices.Values(append(slices.Clone(o.Levels), o.MemKeys)))
		levels = slices.Compact(levels)
	}
	rows := e.keyScaling(ctx, levels, growth, !growth)
	if memory {
		for _, r := range rows {
			if r.Keys == o.MemKeys && isBase(r.Family) || r.Error != "" && isBase(r.Family) {
				rep.Memory = append(rep.Memory, r)
			}
		}
	}
	if growth {
		for _, r := range rows {
			if slices.Contains(o.Levels, r.Keys) || r.Error != "" {
				rep.Growth = append(rep.Growth, r)
			}
		}
	}
}

func isBase(family string) bool { return !strings.HasPrefix(family, "sliding_log, full") }

// eachPair runs f for each a of as and, within it, each b of bs, and
// returns f's rows in that order; it stops early once ctx ends.
func eachPair[A, B, R any](ctx context.Context, as []A, bs []B, f func(a A, b B) R) []R {
	var rows []R
	for _, a := range as {
		for _, b := range bs {
			rows = append(rows, f(a, b))
			if ctx.Err() != nil {
				return rows
			}
		}
	}
	return rows
}

// keepFirst records err's message in *msg unless *msg holds one already:
// a row reports the first thing that went wrong.
func keepFirst(msg *string, err error) {
	if err != nil && *msg == "" {
		*msg = err.Error()
	}
}

func errSuffix(s string) string {
	if s == "" {
		return ""
	}
	return " (error: " + s + ")"
}

// WriteJSON writes the report to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Markdown renders the report: the machine, the command, and one table per
// scenario that ran.
func (r *Report) Markdown() string {
	o := r.opts
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("## shaperbench (%s mode), %s, %.0f s\n\n", r.Mode, r.Started.Format("2006-01-02 15:04 UTC"), r.DurationS)
	if r.Command != "" {
		w("Command: `%s`\n\n", r.Command)
	}
	m := r.Machine
	w("Machine: nproc %d (%s); %s; %s; redis-benchmark: %s; load average %s at the start, %s at the end.\n\n",
		m.NumCPU, m.CPU, m.GoVersion, m.RedisVersion, m.RedisBenchmark, m.LoadStart, m.LoadEnd)
	if len(r.Headlines) > 0 {
		w("Headlines:\n\n")
		for _, h := range r.Headlines {
			w("* %s\n", h)
		}
		w("\n")
	}
	if len(r.Fidelity) > 0 {
		fid, def := fidelityTables(r.Fidelity)
		w("### 1. Fidelity: %d/s, %d workers per process, backlog %d\n\n", o.Rate, o.Workers, o.Backlog)
		w("Ideal: achieved %d/s, at most %d releases in any 1 s, intervals %.0f ms. Burst-1 variants run at P=%d only and stop after %s.\n\n",
			o.Rate, o.Rate+1, 1000/float64(o.Rate), o.Procs[0], o.BurstOneLimit)
		w("%s\n", fid)
		w("### 2. Deferral: lateness of the last task and FIFO order (same runs)\n\n")
		w("%s\n", def)
	}
	if len(r.Decisions) > 0 {
		w("### 3. Decision throughput (decisions/s over 1,000 keys, every decision allowed; medians of %d interleaved rounds of %s)\n\n", o.DecisionRounds, o.DecisionTime)
		w("%s\n", decisionTable(r.Decisions))
	}
	if len(r.Processing) > 0 || len(r.Enqueue) > 0 {
		pt, et := overheadTables(r.Processing, r.Enqueue)
		w("### 4. Overhead\n\nProcessing a backlog (one server each; %d interleaved rounds; best = the least disturbed round):\n\n%s\n", o.Rounds, pt)
		w("Enqueue (%d interleaved rounds of %d enqueues):\n\n%s\n", o.EnqueueRounds, o.EnqueueTasks, et)
	}
	if len(r.Memory) > 0 {
		w("### 5. Memory per key (%s keys, state after one decision; sliding counter after one decision in each of two windows, or with sub-windows in each of its last N sub-windows)\n\n", inum(int64(r.MemKeys)))
		w("%s\n", memoryTable(r.Memory, r.MemKeys))
	}
	if len(r.Growth) > 0 {
		w("### 6. Cost growth (decision latency at 1 goroutine on random populated keys; sliding logs filled to their limit, so their decisions are rejections)\n\n")
		w("%s\n", growthTable(r.Growth))
	}
	if r.Release != nil {
		b.WriteString(r.Release.markdown(o))
	}
	return b.String()
}

// headlines are the ratios the README quotes, computed from the rows.
func headlines(r *Report) []string {
	o := r.opts
	var out []string
	find := func(id string, p int) *FidelityRow {
		for i := range r.Fidelity {
			if f := &r.Fidelity[i]; f.Contender == contenderNames[id] && f.Processes == p {
				return f
			}
		}
		return nil
	}
	for _, p := range o.Procs {
		sh, rc, rr := find(Shaper, p), find(Recipe, p), find(RedisRate, p)
		if sh == nil || sh.Delivered == 0 {
			continue
		}
		lim := float64(o.Rate + 1)
		line := fmt.Sprintf("Fidelity at %d/s with %d process(es), most requests in any 1 s at the sink (at release): shaper %d (%d), limit %d, %.1f/s achieved",
			o.Rate, p, sh.MaxIn1s, sh.MaxIn1sRelease, o.Rate+1, sh.AchievedRate)
		if rc != nil && rc.Delivered > 0 {
			line += fmt.Sprintf("; asynq recipe %d (%d), %.1f× the limit, %.1f/s", rc.MaxIn1s, rc.MaxIn1sRelease, float64(rc.MaxIn1sRelease)/lim, rc.AchievedRate)
		}
		if rr != nil && rr.Delivered > 0 {
			line += fmt.Sprintf("; redis_rate-gated asynq %d (%d), %.1f×, %.1f/s", rr.MaxIn1s, rr.MaxIn1sRelease, float64(rr.MaxIn1sRelease)/lim, rr.AchievedRate)
		}
		out = append(out, line+".")
	}
	for _, p := range r.Processing {
		if p.Ratio > 0 {
			out = append(out, fmt.Sprintf("Overhead, %s handler: shaper unthrottled / raw asynq = %.2f of medians (%.0f vs %.0f tasks/s), %.2f of bests.",
				p.Handler, p.Ratio, p.Shaper, p.Raw, p.BestRatio))
		}
	}
	for _, e := range r.Enqueue {
		if e.Way != wayAsynq && e.Ratio > 0 {
			out = append(out, fmt.Sprintf("Enqueue at %d goroutine(s): %s / asynq.Client.Enqueue = %.2f of medians, %.2f of bests.",
				e.Goroutines, e.Way, e.Ratio, e.BestRatio))
		}
	}
	return out
}
