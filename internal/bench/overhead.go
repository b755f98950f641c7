package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/testsink"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// ProcessingRow is scenario 4a: tasks per second drained from a backlog by
// one asynq server (raw) and by one shaper Dispatcher whose downstream's
// rate is far above what the machine can do (unthrottled), with the same
// worker count, handler, Redis and run. Medians and bests (the least
// disturbed round) over Rounds interleaved rounds.
type ProcessingRow struct {
	Handler        string  `json:"handler"`
	Tasks          int     `json:"tasks"`
	Workers        int     `json:"workers"`
	Raw            float64 `json:"raw_asynq_tasks_per_s"`
	Shaper         float64 `json:"shaper_tasks_per_s"`
	Ratio          float64 `json:"ratio"`
	RawBest        float64 `json:"raw_asynq_best_tasks_per_s"`
	ShaperBest     float64 `json:"shaper_best_tasks_per_s"`
	BestRatio      float64 `json:"ratio_of_bests"`
	RawCmdsPerTask float64 `json:"raw_redis_cmds_per_task"`
	ShaperCmds     float64 `json:"shaper_redis_cmds_per_task"`
	// ShaperLateSkips is the median per round of reservations shaper gave
	// up because its worker woke past the late tolerance (then reserved
	// again): a cost of CPU starvation.
	ShaperLateSkips float64   `json:"shaper_late_skips"`
	RawRounds       []float64 `json:"raw_rounds"`
	ShaperRounds    []float64 `json:"shaper_rounds"`
	Error           string    `json:"error,omitempty"`
}

// EnqueueRow is scenario 4b: enqueues per second at g goroutines for one
// way of enqueuing, and its ratio to asynq.Client.Enqueue at the same g.
type EnqueueRow struct {
	Way        string    `json:"way"`
	Goroutines int       `json:"goroutines"`
	PerSec     float64   `json:"per_s"` // median
	Ratio      float64   `json:"ratio_vs_asynq"`
	Best       float64   `json:"best_per_s"`
	BestRatio  float64   `json:"ratio_of_bests_vs_asynq"`
	Rounds     []float64 `json:"rounds"`
	Error      string    `json:"error,omitempty"`
}

const (
	handlerNoop = "no-op (Go)"
	handlerHTTP = "HTTP POST to the sink"
)

func (e *env) processing(ctx context.Context) []ProcessingRow {
	o := e.opts
	var rows []ProcessingRow
	for _, h := range []string{handlerNoop, handlerHTTP} {
		row := ProcessingRow{Handler: h, Tasks: o.OverheadTasks, Workers: o.Workers}
		var rawCmds, shCmds, skips []float64
		for r := 0; r < o.Rounds; r++ {
			order := []string{Raw, Shaper}
			if r%2 == 1 {
				order = []string{Shaper, Raw}
			}
			for _, id := range order {
				tps, cpt, skip, err := e.drain(ctx, id, h)
				if err != nil {
					row.Error = fmt.Sprintf("%s: %v", id, err)
					continue
				}
				if id == Raw {
					row.RawRounds, rawCmds = append(row.RawRounds, round(tps, 0)), append(rawCmds, cpt)
				} else {
					row.ShaperRounds, shCmds = append(row.ShaperRounds, round(tps, 0)), append(shCmds, cpt)
					skips = append(skips, skip)
				}
			}
		}
		row.Raw, row.Shaper = median(row.RawRounds), median(row.ShaperRounds)
		row.RawBest, row.ShaperBest = best(row.RawRounds), best(row.ShaperRounds)
		row.RawCmdsPerTask, row.ShaperCmds = round(median(rawCmds), 1), round(median(shCmds), 1)
		row.ShaperLateSkips = median(skips)
		if row.Raw > 0 {
			row.Ratio = round(row.Shaper/row.Raw, 3)
		}
		if row.RawBest > 0 {
			row.BestRatio = round(row.ShaperBest/row.RawBest, 3)
		}
		e.logf("overhead: %s handler: raw %.0f/s, shaper %.0f/s, ratio %.3f", h, row.Raw, row.Shaper, row.Ratio)
		rows = append(rows, row)
	}
	return rows
}

// drain enqueues OverheadTasks tasks, starts one server of contender id
// (Raw or Shaper) with handler h, and times first to last handler call.
// For shaper it also reports the late skips.
func (e *env) drain(ctx context.Context, id, h string) (tasksPerSec, cmdsPerTask, lateSkips float64, err error) {
	o := e.opts
	n := o.OverheadTasks
	prefix := e.prefix("ovh-" + id)
	q := prefix + ":" + downstream
	if err := e.enqueueMany(ctx, id, prefix, n, 8); err != nil {
		return 0, 0, 0, err
	}
	var sink *testsink.Sink
	var deliver func(ctx context.Context, t *shaping.Task) error
	if h == handlerHTTP {
		sink = testsink.New()
		defer sink.Close()
		deliver = shaping.HTTPHandler(shaping.HTTPConfig{URL: sink.URL(), Timeout: 5 * time.Second})
	}
	var count, first, last atomic.Int64
	done := make(chan struct{})
	record := func() {
		now := time.Now().UnixNano()
		first.CompareAndSwap(0, now)
		for {
			l := last.Load()
			if now <= l || last.CompareAndSwap(l, now) {
				break
			}
		}
		if count.Add(1) == int64(n) {
			close(done)
		}
	}
	handle := func(ctx context.Context, t *shaping.Task) error {
		if deliver != nil {
			if err := deliver(ctx, t); err != nil {
				return err
			}
		}
		record()
		return nil
	}
	rdb := redis.NewClient(&redis.Options{Addr: e.addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	cmds0 := e.commandsProcessed(ctx)
	var stop func()
	skipsOf := func() float64 { return 0 }
	if id == Raw {
		srv := asynq.NewServerFromRedisClient(rdb, e.asynqConfig(q))
		err = srv.Start(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			tid, _ := asynq.GetTaskID(ctx)
			return handle(ctx, &shaping.Task{ID: tid, Type: t.Type(), Payload: t.Payload(), Downstream: downstream, Cost: 1})
		}))
		stop = srv.Shutdown
	} else {
		reg := prometheus.NewRegistry()
		sf := &shaperFleet{regs: []*prometheus.Registry{reg}}
		skipsOf = func() float64 { return sf.counter(ctx, "shaper_shaping_late_skips_total") }
		d := shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: slog.New(slog.DiscardHandler), Registerer: reg})
		err = d.Add(shaping.Downstream{Name: downstream, Rate: limiters.PerSecond(1_000_000), Workers: o.Workers, Handler: handle})
		if err == nil {
			err = d.Start()
		}
		stop = func() { d.Shutdown(context.Background()) }
	}
	if err != nil {
		return 0, 0, 0, err
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		err = fmt.Errorf("%d of %d tasks processed in 2 min", count.Load(), n)
	case <-ctx.Done():
		err = ctx.Err()
	}
	cmds1 := e.commandsProcessed(ctx)
	stop()
	if err != nil {
		return 0, 0, 0, err
	}
	span := time.Duration(last.Load() - first.Load())
	return float64(n-1) / span.Seconds(), float64(cmds1-cmds0) / float64(n), skipsOf(), nil
}

// asynqEnqueuer enqueues task i with asynq alone into prefix's queue of
// the downstream; closeClient releases its client.
func (e *env) asynqEnqueuer(prefix string) (enq func(ctx context.Context, i int) error, closeClient func() error) {
	c := asynq.NewClientFromRedisClient(e.rdb)
	q := prefix + ":" + downstream
	return func(ctx context.Context, i int) error {
		_, err := c.EnqueueContext(ctx, asynq.NewTask("bench", payload(i)), asynq.Queue(q))
		return err
	}, c.Close
}

// enqueueMany enqueues n tasks from g goroutines (order does not matter).
func (e *env) enqueueMany(ctx context.Context, id, prefix string, n, g int) error {
	var enq func(ctx context.Context, i int) error
	if id == Shaper {
		p := queue.NewProducer(e.rdb, queue.ProducerConfig{Prefix: prefix})
		defer p.Close()
		enq = func(ctx context.Context, i int) error {
			_, err := p.Enqueue(ctx, queue.Task{Downstream: downstream, Payload: payload(i)})
			return err
		}
	} else {
		var closeClient func() error
		enq, closeClient = e.asynqEnqueuer(prefix)
		defer closeClient()
	}
	_, err := countedLoop(ctx, g, n, enq)
	return err
}

// countedLoop makes n calls of f from g goroutines and returns calls per
// second.
func countedLoop(ctx context.Context, g, n int, f func(ctx context.Context, i int) error) (float64, error) {
	var next atomic.Int64
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < g; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(ctx, i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds(), errors.Join(errs...)
}

const (
	wayAsynq    = "asynq.Client.Enqueue"
	wayProducer = "queue.Producer.Enqueue, no admission"
	wayAdmitted = "queue.Producer.Enqueue + token bucket admission"
)

func (e *env) enqueueOverhead(ctx context.Context) []EnqueueRow {
	o := e.opts
	var rows []EnqueueRow
	for _, g := range []int{1, 16} {
		byWay := map[string]*EnqueueRow{}
		ways := []string{wayAsynq, wayProducer, wayAdmitted}
		for _, w := range ways {
			byWay[w] = &EnqueueRow{Way: w, Goroutines: g}
		}
		for r := 0; r < o.EnqueueRounds; r++ {
			for _, w := range ways {
				ps, err := e.enqueueRate(ctx, w, g)
				if err != nil {
					byWay[w].Error = err.Error()
					continue
				}
				byWay[w].Rounds = append(byWay[w].Rounds, round(ps, 0))
			}
		}
		raw, rawBest := median(byWay[wayAsynq].Rounds), best(byWay[wayAsynq].Rounds)
		for _, w := range ways {
			row := byWay[w]
			row.PerSec, row.Best = median(row.Rounds), best(row.Rounds)
			if raw > 0 {
				row.Ratio = round(row.PerSec/raw, 3)
			}
			if rawBest > 0 {
				row.BestRatio = round(row.Best/rawBest, 3)
			}
			rows = append(rows, *row)
		}
		e.logf("enqueue g=%d: asynq %.0f/s, producer %.0f/s, +token bucket %.0f/s", g, raw,
			byWay[wayProducer].PerSec, byWay[wayAdmitted].PerSec)
	}
	return rows
}

func (e *env) enqueueRate(ctx context.Context, way string, g int) (float64, error) {
	n := e.opts.EnqueueTasks
	prefix := e.prefix("enq")
	var enq func(ctx context.Context, i int) error
	switch way {
	case wayAsynq:
		var closeClient func() error
		enq, closeClient = e.asynqEnqueuer(prefix)
		defer closeClient()
	default:
		cfg := queue.ProducerConfig{Prefix: prefix}
		if way == wayAdmitted {
			l, err := limiters.New(e.rdb, limiters.Config{Name: "adm", Algorithm: limiters.TokenBucket,
				Limit: limiters.PerSecond(1_000_000), Prefix: prefix})
			if err != nil {
				return 0, err
			}
			cfg.Admission = map[string]queue.Admission{downstream: {Limiter: l}}
		}
		p := queue.NewProducer(e.rdb, cfg)
		defer p.Close()
		enq = func(ctx context.Context, i int) error {
			_, err := p.Enqueue(ctx, queue.Task{Downstream: downstream, Key: fmt.Sprint("tenant-", i%100), Payload: payload(i)})
			return err
		}
	}
	for i := 0; i < g; i++ { // warm the pool and the script cache
		if err := enq(ctx, n+i); err != nil {
			return 0, err
		}
	}
	return countedLoop(ctx, g, n, enq)
}

func best(xs []float64) float64 {
	b := 0.0
	for _, x := range xs {
		b = max(b, x)
	}
	return b
}

func overheadTables(proc []ProcessingRow, enq []EnqueueRow) (string, string) {
	t := table{head: []string{"handler", "tasks × rounds", "workers", "raw asynq median (tasks/s)", "shaper median (tasks/s)", "ratio of medians",
		"raw asynq best", "shaper best", "ratio of bests", "Redis cmds/task raw", "Redis cmds/task shaper", "shaper late skips"}, align: "lrrrrrrrrrrr"}
	for _, r := range proc {
		if r.Error != "" && (r.Raw == 0 || r.Shaper == 0) {
			t.add(r.Handler, "", "", "error: "+r.Error, "", "", "", "", "", "", "", "")
			continue
		}
		t.add(r.Handler, fmt.Sprintf("%d × %d", r.Tasks, len(r.RawRounds)), fmt.Sprint(r.Workers), num(r.Raw, 0), num(r.Shaper, 0),
			num(r.Ratio, 2), num(r.RawBest, 0), num(r.ShaperBest, 0), num(r.BestRatio, 2), num(r.RawCmdsPerTask, 1), num(r.ShaperCmds, 1), num(r.ShaperLateSkips, 0))
	}
	u := table{head: []string{"enqueue", "goroutines", "median (/s)", "vs asynq.Client (medians)", "best (/s)", "vs asynq.Client (bests)"},
		align: "lrrrrr"}
	for _, r := range enq {
		if r.Error != "" && r.PerSec == 0 {
			u.add(r.Way, fmt.Sprint(r.Goroutines), "error: "+r.Error, "", "", "")
			continue
		}
		u.add(r.Way, fmt.Sprint(r.Goroutines), num(r.PerSec, 0), num(r.Ratio, 2), num(r.Best, 0), num(r.BestRatio, 2))
	}
	return t.String(), u.String()
}
