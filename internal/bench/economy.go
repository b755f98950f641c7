package bench

import (
	"context"
	"slices"
	"sort"
	"time"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/testsink"
)

// EconomyRow is round "economy": the Redis work to release one task, for
// one way of draining the same backlog at one rate with P processes. The
// counts are INFO commandstats deltas on the run's own redis-server over
// the whole drain (process start-up included), so commands that scripts
// run count too, as Redis counts them.
type EconomyRow struct {
	Rate      int    `json:"rate_per_s"`
	Contender string `json:"contender"`
	Processes int    `json:"processes"`
	Workers   int    `json:"workers_per_process"`
	Tasks     int    `json:"tasks"`
	Delivered int    `json:"delivered"`
	Commands  int64  `json:"redis_commands"`
	Scripts   int64  `json:"scripts"` // EVALSHA + EVAL
	// CmdsPerTask and ScriptsPerTask divide by tasks delivered; VsRaw is
	// CmdsPerTask over raw asynq's at the same rate.
	CmdsPerTask    float64 `json:"commands_per_task"`
	ScriptsPerTask float64 `json:"scripts_per_task"`
	VsRaw          float64 `json:"vs_raw_asynq"`
	// Achieved is the release rate (by release time) over the drain
	// without its first second; for raw asynq, which is not limited and
	// drains in about a second, over the whole drain.
	Achieved float64 `json:"achieved_per_s"`
	WallS    float64 `json:"wall_s"`
	Top      string  `json:"top_commands"`
	Error    string  `json:"error,omitempty"`
}

const (
	econRaw     = "asynq, no limit"
	econDefault = "shaper, default workers"
	econTwenty  = "shaper, workers: 20"
)

func (e *env) economy(ctx context.Context) []EconomyRow {
	var raw float64 // econRaw's commands per task at this rate: it runs first
	return eachPair(ctx, e.opts.EconomyRates, []string{econRaw, econDefault, econTwenty}, func(rate int, c string) EconomyRow {
		n := max(int(float64(rate)*e.opts.EconomyDrain.Seconds()), 2)
		row := e.economyRun(ctx, c, rate, n)
		if c == econRaw {
			raw = row.CmdsPerTask
		} else if raw > 0 {
			row.VsRaw = round(row.CmdsPerTask/raw, 2)
		}
		e.logf("economy: %d/s, %s × %d: %.1f commands and %.2f scripts per task (%d/%d delivered)%s", rate, c,
			row.Processes, row.CmdsPerTask, row.ScriptsPerTask, row.Delivered, n, errSuffix(row.Error))
		return row
	})
}

// economyRun enqueues n tasks and drains them with one contender, counting
// Redis commands from just before the processes start until the last
// delivery.
func (e *env) economyRun(ctx context.Context, c string, rate, n int) EconomyRow {
	o := e.opts
	row := EconomyRow{Rate: rate, Contender: c, Processes: o.EconomyProcs, Tasks: n, Workers: 20}
	sink := testsink.New()
	defer sink.Close()
	// Every contender drains the same tasks, as shaper's Producer enqueues
	// them (with its default retention of completed tasks), so the counts
	// compare the release paths, not two kinds of task.
	prefix := e.prefix("econ")
	if err := e.enqueueMany(ctx, Shaper, prefix, n, 8); err != nil {
		row.Error = err.Error()
		return row
	}
	limit := 3*time.Duration(float64(n)/float64(rate)*float64(time.Second)) + 30*time.Second
	var stop func(context.Context) error
	start := time.Now()
	d, err := e.countCommands(ctx, func() error {
		var err error
		switch c {
		case econRaw:
			var f *asynqFleet
			f, err = e.startRawAsynq(keys.New(prefix).Queue(downstream), o.EconomyProcs, 20, sink.URL())
			if f != nil {
				stop = f.stop
			}
		default:
			workers := 0
			if c == econTwenty {
				workers = 20
			}
			var f *procFleet
			f, err = e.launch(ctx, prefix, o.EconomyProcs, e.shaperYAML(prefix, httpDownstream(downstream, rate, workers, sink.URL())), time.Minute)
			if f != nil {
				stop, row.Workers = f.stop, f.workers()
			}
		}
		if err != nil {
			return err
		}
		return awaitDelivered(ctx, sink, n, start, limit)
	})
	row.WallS = round(time.Since(start).Seconds(), 1)
	stopInto(ctx, stop, &err)
	if err != nil {
		row.Error = err.Error()
	}
	hits := sink.OK()
	row.Delivered = distinct(hits)
	row.Commands, row.Scripts, row.Top = d.Total(), scripts(d), topCommands(d, 8)
	if row.Delivered > 0 {
		row.CmdsPerTask = round(float64(row.Commands)/float64(row.Delivered), 1)
		row.ScriptsPerTask = round(float64(row.Scripts)/float64(row.Delivered), 2)
	}
	skip := time.Second
	if c == econRaw {
		skip = 0
	}
	row.Achieved = round(keepUpRate(releaseTimes(hits), skip), 1)
	return row
}

// KeepupRow is round "keepup": P shaper processes with the default worker
// count drain a backlog of about KeepupDrain × rate.
type KeepupRow struct {
	Rate      int  `json:"rate_per_s"`
	Processes int  `json:"processes"`
	Workers   int  `json:"workers_per_process"`
	Backlog   int  `json:"backlog"`
	Delivered int  `json:"delivered"`
	Releases  int  `json:"releases"` // duplicates included
	Complete  bool `json:"complete"`
	// Achieved is releases per second by release time (X-Shaper-Released)
	// over the drain without its first second; KeepUpPct is it over the
	// rate.
	Achieved  float64 `json:"achieved_per_s"`
	KeepUpPct float64 `json:"keep_up_pct"`
	// MaxIn1sRelease is the most releases in any 1 s by release time,
	// MaxIn1sSlot by the slot each was reserved (X-Shaper-Slot: what the
	// bucket granted, before wake-up jitter), MaxIn1sSink by arrival at
	// the sink.
	MaxIn1sRelease int     `json:"max_in_any_1s_at_release"`
	MaxIn1sSlot    int     `json:"max_in_any_1s_by_slot"`
	MaxIn1sSink    int     `json:"max_in_any_1s_at_sink"`
	DrainS         float64 `json:"drain_s"`
	Error          string  `json:"error,omitempty"`
}

func (e *env) keepup(ctx context.Context) []KeepupRow {
	return eachPair(ctx, e.opts.KeepupRates, e.opts.ReleaseProcs, func(rate, p int) KeepupRow {
		row := e.keepupRun(ctx, rate, p)
		e.logf("keepup: %d/s × %d (workers %d): %.1f/s (%.1f%%), max %d in 1 s at release, %d/%d delivered%s", rate, p,
			row.Workers, row.Achieved, row.KeepUpPct, row.MaxIn1sRelease, row.Delivered, row.Backlog, errSuffix(row.Error))
		return row
	})
}

func (e *env) keepupRun(ctx context.Context, rate, p int) KeepupRow {
	o := e.opts
	n := max(int(float64(rate)*o.KeepupDrain.Seconds()), 2)
	row := KeepupRow{Rate: rate, Processes: p, Backlog: n}
	sink := testsink.New()
	defer sink.Close()
	prefix := e.prefix("keep")
	if err := e.enqueueMany(ctx, Shaper, prefix, n, 8); err != nil {
		row.Error = err.Error()
		return row
	}
	start := time.Now()
	f, err := e.launch(ctx, prefix, p, e.shaperYAML(prefix, httpDownstream(downstream, rate, 0, sink.URL())), time.Minute)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	row.Workers = f.workers()
	limit := 3*o.KeepupDrain + 30*time.Second
	row.Complete = pollUntil(ctx, start.Add(limit), 20*time.Millisecond, func() bool { return sink.DistinctOK() >= n })
	if err := f.stop(ctx); err != nil {
		row.Error = err.Error()
	}
	fillKeepup(&row, sink.OK())
	return row
}

// fillKeepup computes the rate and window columns from the sink's hits.
func fillKeepup(row *KeepupRow, hits []testsink.Hit) {
	row.Delivered, row.Releases = distinct(hits), len(hits)
	rel := releaseTimes(hits)
	row.Achieved = round(keepUpRate(rel, time.Second), 2)
	if row.Rate > 0 {
		row.KeepUpPct = round(100*row.Achieved/float64(row.Rate), 1)
	}
	row.MaxIn1sRelease = testsink.MaxInWindow(rel, time.Second)
	row.MaxIn1sSink = testsink.MaxInWindow(testsink.Times(hits), time.Second)
	var slots []time.Time
	for _, h := range hits {
		if !h.Slot.IsZero() {
			slots = append(slots, h.Slot)
		}
	}
	row.MaxIn1sSlot = testsink.MaxInWindow(slots, time.Second)
	row.DrainS = round(testsink.Span(rel).Seconds(), 2)
}

// releaseTimes are the hits' release times (X-Shaper-Released; the
// arrival where a hit has none), sorted.
func releaseTimes(hits []testsink.Hit) []time.Time {
	ts := make([]time.Time, 0, len(hits))
	for _, h := range hits {
		if !h.Wake.IsZero() {
			ts = append(ts, h.Wake)
		} else {
			ts = append(ts, h.At)
		}
	}
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	return ts
}

// keepUpRate is events per second over sorted ts without the first skip
// (the ramp while processes start): (n−1)/(last−first) of the rest.
func keepUpRate(ts []time.Time, skip time.Duration) float64 {
	if len(ts) < 2 {
		return 0
	}
	from := ts[0].Add(skip)
	i := sort.Search(len(ts), func(i int) bool { return !ts[i].Before(from) })
	return testsink.Rate(ts[i:])
}
