// Package plan turns a loaded config into what shaper runs: the
// downstreams the dispatcher adds, with every derived value (limit, max
// wait, max cost, workers, schedule, adaptive rate, batch, late
// tolerance); the producer's settings and admission policies; and the cron
// producers. It is the one place that derives values from a
// config.Config, so the daemon, the quick start, ctl and the status page
// read the same numbers, and config itself knows nothing of the
// dispatcher's types.
package plan

import (
	"cmp"
	"fmt"
	"math"
	"time"

	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/cronspec"
	"github.com/shaper-io/shaper/internal/sizing"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// Plan is a config as values to run. Build returns it.
type Plan struct {
	// Prefix starts every Redis key (redis.prefix).
	Prefix string
	// Listen is the HTTP server's address; "" when it is off.
	Listen string
	// Dispatcher configures the dispatcher; Logger and Registerer are the
	// caller's to set.
	Dispatcher shaping.Config
	// Downstreams are the config's downstreams, in the file's order.
	Downstreams []Downstream
	// Producer configures the producer; Admission, Registerer and Logger
	// are the caller's to set (NewProducer does).
	Producer queue.ProducerConfig
	// Admission is each downstream's admission policy, by name; a
	// downstream without one is absent.
	Admission map[string]Admission
	// Cron lists the periodic producers.
	Cron []queue.CronJob

	byName map[string]int
}

// Downstream is one downstream of the plan.
type Downstream struct {
	// Shaping is what Dispatcher.Add takes, every derived field set but
	// Handler: the caller builds that from Config.Handler.
	Shaping shaping.Downstream
	// Config is the downstream as the file writes it: its handler, and its
	// rates as written (for status pages).
	Config config.Downstream
}

// batchLateToleranceCap bounds the late tolerance of a batching
// downstream: a worker more than a second late for its batch's slot
// wastes the slot rather than write.
const batchLateToleranceCap = time.Second

// Build derives the plan from cfg, as Parse or Load return it (defaults
// filled, validated). Its errors name the field, like config's.
func Build(cfg *config.Config) (*Plan, error) {
	p := &Plan{Prefix: cfg.Redis.Prefix, Admission: map[string]Admission{}, byName: map[string]int{},
		Dispatcher: shaping.Config{Prefix: cfg.Redis.Prefix, ShutdownTimeout: time.Duration(cfg.ShutdownTimeout),
			RedisTimeout: time.Duration(cfg.Redis.Timeout)},
		Producer: queue.ProducerConfig{Prefix: cfg.Redis.Prefix, MaxPayload: int(cfg.HTTP.MaxBody),
			MaxRetry: map[string]int{}, Batched: map[string]int{}, MaxCost: map[string]int64{}, Shaping: map[string]queue.Shaping{}}}
	for i, dc := range cfg.Downstreams {
		sd, err := shapingDownstream(dc)
		if err != nil {
			return nil, fmt.Errorf("config: downstreams[%d].schedule: %w", i, err)
		}
		p.byName[dc.Name] = len(p.Downstreams)
		p.Downstreams = append(p.Downstreams, Downstream{Shaping: sd, Config: dc})
		p.Producer.Downstreams = append(p.Producer.Downstreams, dc.Name)
		p.Producer.MaxRetry[dc.Name] = dc.MaxRetry
		p.Producer.MaxCost[dc.Name] = sd.MaxCost
		p.Producer.Shaping[dc.Name] = producerShaping(dc, sd)
		if g := batchGroups(dc); g > 0 {
			p.Producer.Batched[dc.Name] = g
		}
		if a := admission(cfg, dc); a != nil {
			p.Admission[dc.Name] = *a
		}
	}
	if cfg.HTTP.Enabled() {
		p.Listen = cfg.HTTP.Listen
	}
	jobs, err := cronJobs(cfg)
	if err != nil {
		return nil, err
	}
	p.Cron = jobs
	return p, nil
}

// Downstream returns the downstream called name.
func (p *Plan) Downstream(name string) (*Downstream, bool) {
	i, ok := p.byName[name]
	if !ok {
		return nil, false
	}
	return &p.Downstreams[i], true
}

// shapingDownstream derives the dispatcher's view of dc; its error is the
// schedule's.
func shapingDownstream(dc config.Downstream) (shaping.Downstream, error) {
	lim, wait := dc.Limit(), dc.MaxWaitDuration()
	sched, err := rateSchedule(dc)
	if err != nil {
		return shaping.Downstream{}, err
	}
	sd := shaping.Downstream{Name: dc.Name, Rate: lim, Burst: dc.Burst, MaxWait: wait,
		MaxCost: cmp.Or(dc.MaxCost, shaping.DefaultMaxCost(lim, wait, dc.Burst)), Workers: dc.Workers,
		Schedule: sched, Adaptive: adaptive(dc),
		Concurrency: dc.Concurrency, KeyConcurrency: dc.KeyConcurrency, LeaseTime: time.Duration(dc.Lease),
		ShapingMode: dc.ShapingMode.Limiters()}
	if b := dc.Batch; b != nil {
		sd.Batch = &shaping.Batch{MaxRows: b.MaxRows, MaxDelay: time.Duration(b.MaxDelay), Grace: time.Duration(b.Grace)}
		sd.LateTolerance = batchLateTolerance(dc)
	}
	return sd, nil
}

// rateSchedule is dc's schedule, each change read in dc's time zone.
func rateSchedule(dc config.Downstream) (shaping.RateSchedule, error) {
	loc, err := dc.Location()
	if err != nil {
		return nil, err
	}
	var rs shaping.RateSchedule
	for _, c := range dc.Schedule {
		spec := cronspec.InZone(c.Cron, loc)
		s, err := shaping.CronParser.Parse(spec)
		if err != nil {
			return nil, fmt.Errorf("invalid cron expression %q: %v", spec, err)
		}
		rs = append(rs, shaping.RateChange{Spec: spec, When: s, Rate: c.Rate.Limit()})
	}
	return rs, nil
}

// adaptive is dc's AIMD settings (nil when off); the ceiling defaults to
// the downstream's rate.
func adaptive(dc config.Downstream) *shaping.Adaptive {
	a := dc.Adaptive
	if a == nil {
		return nil
	}
	ceiling := dc.Limit()
	if !a.Ceiling.IsZero() {
		ceiling = a.Ceiling.Limit()
	}
	return &shaping.Adaptive{Floor: a.Floor.Limit(), Ceiling: ceiling, Decrease: a.Decrease, Step: a.Step.Limit(),
		Interval: time.Duration(a.Interval)}
}

// batchLateTolerance is the late tolerance of a batching downstream: the
// dispatcher's rule (sizing.LateTolerance) for a full batch at the
// configured rate, at most a second, so that a worker a little late for a
// 250ms slot still writes its batch instead of wasting the slot. Zero (the
// dispatcher's default) when the downstream does not batch.
func batchLateTolerance(dc config.Downstream) time.Duration {
	if dc.Batch == nil || dc.Batch.MaxRows < 1 || dc.Limit().PerSec() <= 0 {
		return 0
	}
	return min(sizing.LateTolerance(dc.Limit(), int64(dc.Batch.MaxRows)), batchLateToleranceCap)
}

// batchGroups is how many aggregation groups a producer spreads dc's
// tasks over (queue.ProducerConfig.Batched), sized for the highest rate
// dc may run at (its rate, its schedule's rates, its adaptive ceiling); 0
// when it does not batch.
func batchGroups(dc config.Downstream) int {
	if dc.Batch == nil {
		return 0
	}
	rate := dc.Limit().PerSec()
	for _, c := range dc.Schedule {
		rate = math.Max(rate, c.Rate.Limit().PerSec())
	}
	if a := dc.Adaptive; a != nil {
		rate = math.Max(rate, a.Ceiling.Limit().PerSec())
	}
	return shaping.BatchGroups(rate, dc.Batch.MaxRows)
}

// cronJobs turns the config's cron entries into queue.CronJobs.
func cronJobs(cfg *config.Config) ([]queue.CronJob, error) {
	var out []queue.CronJob
	for i, j := range cfg.Cron {
		loc, err := j.Location()
		if err != nil {
			return nil, fmt.Errorf("config: cron[%d].timezone: %w", i, err)
		}
		s, err := shaping.CronParser.Parse("CRON_TZ=" + loc.String() + " " + j.Schedule)
		if err != nil {
			return nil, fmt.Errorf("config: cron[%d].schedule: %w", i, err)
		}
		payload, err := j.PayloadJSON()
		if err != nil {
			return nil, fmt.Errorf("config: cron[%d].payload: %w", i, err)
		}
		out = append(out, queue.CronJob{Name: j.Name, Schedule: s, Task: queue.Task{
			Downstream: j.Downstream, Type: j.Type, Payload: payload, Key: j.Key, Cost: j.Cost}})
	}
	return out, nil
}

// producerShaping is what the producer needs of dc's shaping to predict a
// task's start and apply its on_late.
func producerShaping(dc config.Downstream, sd shaping.Downstream) queue.Shaping {
	sh := queue.Shaping{Rate: dc.Limit(), MaxWait: sd.MaxWait}
	if dc.OnLate == config.LateReject {
		sh.OnLate = queue.LateReject
	}
	return sh
}
