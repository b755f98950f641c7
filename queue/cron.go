package queue

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/metrics"
)

// CronJob enqueues Task each time Schedule fires.
type CronJob struct {
	// Name identifies the job in its tick locks, task IDs and metrics.
	Name string
	// Schedule says when it fires; "@every d" ticks on multiples of d
	// since the epoch in every process (see NextTick).
	Schedule cron.Schedule
	// Task is enqueued at every tick, with UniqueKey "cron:<Name>:<tick>".
	Task Task
}

// Cron runs cron jobs so that each tick is enqueued exactly once however
// many processes run the same jobs: at a tick, every process tries to take
// a lock named by the job and the tick's time (SET NX, one atomic command)
// and only the winner enqueues. The task's ID is "cron:<job>:<unix tick>",
// a second guard against a duplicate.
//
// Ticks are computed from the schedule alone, never from when a process
// started: an "@every 10s" job ticks on multiples of 10s since the epoch in
// every process, so all processes name the same ticks.
type Cron struct {
	rdb   redis.UniversalClient
	p     *Producer
	space keys.Space
	jobs  []CronJob
	log   *slog.Logger
	m     *metrics.Metrics // nil records nothing
	now   func() time.Time
}

// NewCron returns a Cron enqueuing through p (so admission applies), its
// locks under prefix ("" means "shaper"). log nil means slog.Default(); reg
// is where it registers shaper_cron_ticks_total (nil records nothing).
func NewCron(rdb redis.UniversalClient, p *Producer, prefix string, jobs []CronJob, log *slog.Logger, reg prometheus.Registerer) *Cron {
	if log == nil {
		log = slog.Default()
	}
	return &Cron{rdb: rdb, p: p, space: keys.New(prefix), jobs: jobs, log: log, m: metrics.New(reg), now: time.Now}
}

// NextTick is the first tick of s strictly after t.
func NextTick(s cron.Schedule, t time.Time) time.Time {
	if every, ok := s.(cron.ConstantDelaySchedule); ok {
		d := every.Delay
		return t.Truncate(d).Add(d) // epoch-aligned, the same in every process
	}
	return s.Next(t)
}

// Run fires the jobs until ctx ends.
func (c *Cron) Run(ctx context.Context) {
	done := make(chan struct{})
	for _, j := range c.jobs {
		go func() {
			defer func() { done <- struct{}{} }()
			c.runJob(ctx, j)
		}()
	}
	for range c.jobs {
		<-done
	}
}

func (c *Cron) runJob(ctx context.Context, j CronJob) {
	for {
		tick := NextTick(j.Schedule, c.now())
		if tick.IsZero() {
			return
		}
		t := time.NewTimer(time.Until(tick))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		outcome, err := c.Fire(ctx, j, tick)
		if c.m != nil {
			c.m.CronTicks.WithLabelValues(j.Name, outcome).Inc()
		}
		if err != nil {
			c.log.Warn("cron: tick not enqueued", "job", j.Name, "tick", tick.UTC().Format(time.RFC3339), "outcome", outcome, "err", err)
		}
	}
}

// lockTTL keeps a tick's lock well past any clock skew between processes:
// two periods, at least a minute, at most a day.
func lockTTL(s cron.Schedule, tick time.Time) time.Duration {
	period := NextTick(s, tick).Sub(tick)
	return min(max(2*period, time.Minute), 24*time.Hour)
}

// Fire enqueues one tick of j unless another process already did. The
// outcome is "enqueued", "deferred", "taken" (another process has it),
// "rejected" (admission) or "error".
func (c *Cron) Fire(ctx context.Context, j CronJob, tick time.Time) (string, error) {
	ok, err := c.rdb.SetNX(ctx, c.space.CronLock(j.Name, tick.Unix()), c.now().UTC().Format(time.RFC3339Nano), lockTTL(j.Schedule, tick)).Result()
	if err != nil {
		return "error", fmt.Errorf("cron %q: lock: %w", j.Name, err)
	}
	if !ok {
		return "taken", nil
	}
	t := j.Task
	t.UniqueKey = fmt.Sprintf("cron:%s:%d", j.Name, tick.Unix())
	rec, err := c.p.Enqueue(ctx, t)
	switch rec.Outcome {
	case Rejected:
		return "rejected", err
	case Duplicate:
		return "taken", nil
	case NotEnqueued:
		return "error", err
	case Deferred:
		return "deferred", nil
	}
	return "enqueued", nil
}
