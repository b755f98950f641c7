package queue

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"

	"github.com/shaper-io/shaper/clock"
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
// every process, so all processes name the same ticks. Each job waits for
// its next tick on CronConfig.Clock's timer (not robfig/cron's runner), so
// a fake clock drives ticks in tests.
// The zero Cron is not usable: NewCron builds one.
type Cron struct {
	rdb   redis.UniversalClient
	p     *Producer
	space keys.Space
	jobs  []CronJob
	log   *slog.Logger
	m     *metrics.Metrics // nil records nothing
	clock clock.Clock
}

// CronConfig configures a Cron. The zero value runs no job.
type CronConfig struct {
	// Prefix starts the tick locks' keys; "" means "shaper".
	Prefix string
	// Jobs are the jobs to run.
	Jobs []CronJob
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Registerer is where shaper_cron_ticks_total is registered; nil
	// records nothing.
	Registerer prometheus.Registerer
	// Clock tells the time ticks are computed from and arms the waits for
	// them; nil means clock.Real. Ticks and their task IDs follow it, the
	// lock's exactly-once guard does not depend on it.
	Clock clock.Clock
}

// NewCron returns a Cron enqueuing through p (so admission applies).
func NewCron(rdb redis.UniversalClient, p *Producer, cfg CronConfig) *Cron {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Cron{rdb: rdb, p: p, space: keys.New(cfg.Prefix), jobs: cfg.Jobs, log: log, m: metrics.New(cfg.Registerer),
		clock: clock.Or(cfg.Clock)}
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
		tick := NextTick(j.Schedule, c.clock.Now())
		if tick.IsZero() {
			return
		}
		t := c.clock.NewTimer(tick.Sub(c.clock.Now()))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
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
	ok, err := c.rdb.SetNX(ctx, c.space.CronLock(j.Name, tick.Unix()), c.clock.Now().UTC().Format(time.RFC3339Nano), lockTTL(j.Schedule, tick)).Result()
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
