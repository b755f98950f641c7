package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/testsink"
)

// KillRow is round "kill": P shaper processes (default workers) drain
// KillBacklog tasks at KillRate; KillAfter after the first delivery one
// process gets SIGKILL. Its held tasks (dequeued, waiting for a slot) stay
// in asynq's active list until someone returns them.
type KillRow struct {
	Rate      int `json:"rate_per_s"`
	Processes int `json:"processes"`
	Workers   int `json:"workers_per_process"`
	Backlog   int `json:"backlog"`
	// KilledAtS is the kill, in seconds after the first delivery.
	KilledAtS float64 `json:"killed_at_s"`
	// ActiveAtKill is the queue's active list right after the kill (every
	// process's dequeued tasks, the killed one's included): the proxy for
	// held tasks. Stranded are those of them not delivered within
	// strandedAfter of the kill (the survivors release what they hold
	// within a few seconds); Recovered is what the survivors say they
	// returned for the dead process (shaper_shaping_recovered_tasks_total,
	// −1 if it could not be read).
	ActiveAtKill int     `json:"active_at_kill"`
	Stranded     int     `json:"stranded"`
	Recovered    float64 `json:"recovered"`
	// LastActiveS is when the last task active at the kill was delivered,
	// in seconds after the kill (−1: some never were).
	LastActiveS float64 `json:"last_active_delivered_s"`
	// RunS is the first to the last first delivery; IdealS is
	// (backlog−1)/rate, ExtraS the difference.
	RunS       float64 `json:"run_s"`
	IdealS     float64 `json:"ideal_s"`
	ExtraS     float64 `json:"extra_s"`
	Delivered  int     `json:"delivered"`
	Lost       int     `json:"lost"`
	Duplicates int     `json:"duplicates"` // deliveries beyond the first of a task
	Complete   bool    `json:"complete"`
	Error      string  `json:"error,omitempty"`
}

// strandedAfter is how long after the kill a task active at the kill may
// take and still count as released by a living process: each survivor
// holds up to its workers (51 at 50/s), which the two of them release at
// the shared rate within about 2 s, plus the slots the dead process had
// reserved (max_wait).
const strandedAfter = 5 * time.Second

func (e *env) kill(ctx context.Context) KillRow {
	o := e.opts
	row := KillRow{Rate: o.KillRate, Processes: o.KillProcs, Backlog: o.KillBacklog,
		IdealS: round(float64(o.KillBacklog-1)/float64(o.KillRate), 2), LastActiveS: -1, Recovered: -1}
	sink := testsink.New()
	defer sink.Close()
	prefix := e.prefix("kill")
	f, first, err := e.servingBacklog(ctx, prefix, sink, o.KillRate, o.KillProcs, o.KillBacklog)
	if f != nil {
		defer func() { keepFirst(&row.Error, f.stop(ctx)) }()
		row.Workers = f.workers()
	}
	if err != nil {
		row.Error = err.Error()
		return row
	}
	sleepCtx(ctx, time.Until(first.Add(o.KillAfter)))
	if err := f.kill(0); err != nil {
		row.Error = fmt.Sprintf("kill: %v", err)
		return row
	}
	killedAt := time.Now()
	row.KilledAtS = round(killedAt.Sub(first).Seconds(), 2)
	in := asynq.NewInspectorFromRedisClient(e.rdb)
	active, err := in.ListActiveTasks(keys.New(prefix).Queue(downstream), asynq.PageSize(100_000))
	if err != nil {
		row.Error = fmt.Sprintf("list active: %v", err)
		return row
	}
	ids := make([]string, len(active))
	for i, t := range active {
		ids[i] = t.ID
	}
	row.Complete = pollUntil(ctx, killedAt.Add(o.KillLimit), 20*time.Millisecond, func() bool {
		return sink.DistinctOK() >= o.KillBacklog
	})
	if row.Complete {
		// A little longer, so a duplicate that trails the last first
		// delivery is seen too.
		sleepCtx(ctx, 2*time.Second)
	}
	row.Recovered = f.counter(ctx, "shaper_shaping_recovered_tasks_total")
	fillKill(&row, sink.OK(), ids, killedAt)
	return row
}

// servingBacklog is what the kill and pause rounds start with: a backlog
// of n tasks, procs shaper processes at rate delivering to sink, and the
// first delivery, waited for up to 30 s. It returns the fleet (nil when
// it did not start), to stop, and the first delivery's time.
func (e *env) servingBacklog(ctx context.Context, prefix string, sink *testsink.Sink, rate, procs, n int) (*procFleet, time.Time, error) {
	if err := e.enqueueBacklog(ctx, Shaper, prefix, n); err != nil {
		return nil, time.Time{}, err
	}
	f, err := e.launch(ctx, prefix, procs, e.shaperYAML(prefix, httpDownstream(downstream, rate, 0, sink.URL())), time.Minute)
	if err != nil {
		return nil, time.Time{}, err
	}
	if !pollUntil(ctx, time.Now().Add(30*time.Second), 10*time.Millisecond, func() bool { return sink.DistinctOK() > 0 }) {
		return f, time.Time{}, errors.New("no delivery within 30 s")
	}
	return f, sink.OK()[0].At, nil
}

// fillKill computes the columns from the sink's hits, the ids active at
// the kill and the kill's time.
func fillKill(row *KillRow, hits []testsink.Hit, active []string, killedAt time.Time) {
	firstOf := map[string]time.Time{} // by payload (stable across retries)
	firstByID := map[string]time.Time{}
	for _, h := range hits {
		if t, ok := firstOf[h.Payload]; !ok || h.At.Before(t) {
			firstOf[h.Payload] = h.At
		}
		if t, ok := firstByID[h.TaskID]; !ok || h.At.Before(t) {
			firstByID[h.TaskID] = h.At
		}
	}
	row.Delivered = len(firstOf)
	row.Lost = row.Backlog - row.Delivered
	row.Duplicates = len(hits) - row.Delivered
	var lo, hi time.Time
	for _, t := range firstOf {
		if lo.IsZero() || t.Before(lo) {
			lo = t
		}
		if t.After(hi) {
			hi = t
		}
	}
	row.RunS = round(hi.Sub(lo).Seconds(), 2)
	row.ExtraS = round(row.RunS-row.IdealS, 2)
	row.ActiveAtKill = len(active)
	last, all := time.Duration(0), true
	for _, id := range active {
		t, ok := firstByID[id]
		if !ok {
			all = false
			row.Stranded++
			continue
		}
		if d := t.Sub(killedAt); d > strandedAfter {
			row.Stranded++
		}
		last = max(last, t.Sub(killedAt))
	}
	if all {
		row.LastActiveS = round(last.Seconds(), 2)
	}
}
