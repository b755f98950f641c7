package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/shaper-io/shaper/internal/keys"
)

// IdleRow is round "idle": P processes serving N downstreams (rate 10/s,
// log handler) and no task. Commands are INFO commandstats deltas over
// IdleWindow after IdleWarmup; connections, goroutines and RSS are read
// after the warm-up and given per process.
type IdleRow struct {
	Who         string  `json:"who"`
	Downstreams int     `json:"downstreams"`
	Processes   int     `json:"processes"`
	CmdsPerS    float64 `json:"commands_per_s"`
	// PerDsProc is CmdsPerS / downstreams / processes.
	PerDsProc   float64 `json:"commands_per_s_per_downstream_per_process"`
	Connections float64 `json:"connections_per_process"`
	Goroutines  float64 `json:"goroutines_per_process"` // go_goroutines; -1 if not read
	RSSMB       float64 `json:"rss_mb_per_process"`
	// StartS is the slowest process's time from exec to "shaper started"
	// (dispatcher and HTTP serving); the processes start together.
	StartS float64 `json:"start_s"`
	Top    string  `json:"top_commands"`
	Error  string  `json:"error,omitempty"`
}

const idleRaw = "asynq, no limit (1 server, 1 queue)"

func (e *env) idle(ctx context.Context) []IdleRow {
	rows := eachPair(ctx, e.opts.IdleLevels, e.opts.ReleaseProcs, func(n, p int) IdleRow {
		row := e.idleShaper(ctx, n, p)
		e.logf("idle: %d downstreams × %d: %.0f commands/s (%.2f per downstream per process), %.0f connections, %.0f goroutines, %.1f MB per process, start %.2f s%s",
			n, p, row.CmdsPerS, row.PerDsProc, row.Connections, row.Goroutines, row.RSSMB, row.StartS, errSuffix(row.Error))
		return row
	})
	if ctx.Err() != nil {
		return rows
	}
	row := e.idleRaw(ctx)
	e.logf("idle: %s: %.1f commands/s%s", idleRaw, row.CmdsPerS, errSuffix(row.Error))
	return append(rows, row)
}

// idleConfig is n downstreams as a new user writes them.
func idleConfig(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "  - {name: ds%03d, rate: 10/s, handler: {type: log}}\n", i)
	}
	return b.String()
}

func (e *env) idleShaper(ctx context.Context, n, p int) IdleRow {
	o := e.opts
	row := IdleRow{Who: "shaper", Downstreams: n, Processes: p}
	prefix := e.prefix("idle")
	conns0, err := e.infoInt(ctx, "clients", "connected_clients")
	if err != nil {
		row.Error = err.Error()
		return row
	}
	f, err := e.launch(ctx, prefix, p, e.shaperYAML(prefix, idleConfig(n)), 2*time.Minute)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	defer func() { keepFirst(&row.Error, f.stop(ctx)) }()
	for _, w := range f.watch {
		d, _, _ := w.state()
		row.StartS = max(row.StartS, round(d.Seconds(), 2))
	}
	if !sleepCtx(ctx, o.IdleWarmup) {
		row.Error = ctx.Err().Error()
		return row
	}
	conns1, err := e.infoInt(ctx, "clients", "connected_clients")
	if err != nil {
		row.Error = err.Error()
		return row
	}
	row.Connections = round(float64(conns1-conns0)/float64(p), 1)
	var g, rss float64
	for i, pid := range f.pids {
		v, err := scrapeCounter(ctx, f.metrics[i], "go_goroutines")
		if err != nil {
			g = -1
		} else if g >= 0 {
			g += v
		}
		rss += float64(rssKB(pid)) / 1024
	}
	row.Goroutines, row.RSSMB = -1, round(rss/float64(p), 1)
	if g >= 0 {
		row.Goroutines = round(g/float64(p), 0)
	}
	e.idleWindow(ctx, &row)
	return row
}

// idleWindow counts commands over IdleWindow into row.
func (e *env) idleWindow(ctx context.Context, row *IdleRow) {
	win := e.opts.IdleWindow
	d, err := e.countCommands(ctx, func() error {
		if !sleepCtx(ctx, win) { // the fixed measuring window itself
			return ctx.Err()
		}
		return nil
	})
	if err != nil {
		row.Error = err.Error()
		return
	}
	row.CmdsPerS = round(float64(d.Total())/win.Seconds(), 1)
	row.PerDsProc = round(row.CmdsPerS/float64(row.Downstreams)/float64(row.Processes), 2)
	row.Top = topCommands(d, 8)
}

// idleRaw is the reference: one asynq server (20 workers, asynq's default
// 1 s task check) on one empty queue, in this process.
func (e *env) idleRaw(ctx context.Context) IdleRow {
	row := IdleRow{Who: idleRaw, Downstreams: 1, Processes: 1, Goroutines: -1}
	conns0, err := e.infoInt(ctx, "clients", "connected_clients")
	if err != nil {
		row.Error = err.Error()
		return row
	}
	f, err := e.startRawAsynq(keys.New(e.prefix("idle-raw")).Queue(downstream), 1, 20, "http://127.0.0.1:1/unused")
	if err != nil {
		row.Error = err.Error()
		return row
	}
	defer f.stop(ctx)
	if !sleepCtx(ctx, e.opts.IdleWarmup) {
		row.Error = ctx.Err().Error()
		return row
	}
	if conns1, err := e.infoInt(ctx, "clients", "connected_clients"); err == nil {
		row.Connections = float64(conns1 - conns0)
	}
	e.idleWindow(ctx, &row)
	return row
}

// sleepCtx sleeps d unless ctx ends first; it reports whether it slept
// the whole d. The idle round measures over fixed windows, so this is a
// measuring interval, not a wait for a condition.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	wait, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	<-wait.Done()
	return ctx.Err() == nil
}
