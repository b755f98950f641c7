// Package plan turns a loaded config into what shaper runs: how to reach
// Redis and serve HTTP (with the secrets' sources, read only when
// needed); the downstreams the dispatcher adds, with every derived value
// (limit, max wait, max cost, workers, schedule, adaptive rate, batch,
// late tolerance) and what their handlers are built from; the producer's
// settings and admission policies; and the cron producers. It is the one
// place that derives values from a config.Config: after config.Load,
// the daemon, the quick start, ctl, the enqueue CLI and the status page
// read only the plan, and config itself knows nothing of the
// dispatcher's types.
package plan

import (
	"cmp"
	"fmt"
	"math"
	"time"

	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/cronspec"
	"github.com/shaper-io/shaper/internal/priority"
	"github.com/shaper-io/shaper/internal/redisconn"
	"github.com/shaper-io/shaper/internal/rlheader"
	"github.com/shaper-io/shaper/internal/sizing"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// Plan is a config as values to run. Build returns it.
type Plan struct {
	// Prefix starts every Redis key (redis.prefix).
	Prefix string
	// Redis is how to reach Redis (redis.*); the password is read when
	// redisconn.Open connects.
	Redis redisconn.Options
	// Listen is the HTTP server's address; "" when it is off.
	Listen string
	// Token is the bearer token the enqueue and control endpoints require
	// (http.token_env); zero when none is.
	Token Secret
	// MaxBody is the largest HTTP request body accepted (http.max_body).
	MaxBody int64
	// MetricsKeys serves the per-key series on /metrics
	// (http.metrics_keys; server.Options.MetricsKeys).
	MetricsKeys bool
	// Dispatcher configures the dispatcher; Logger and Registerer are the
	// caller's to set. Its ShutdownTimeout is shutdown_timeout.
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
	// Handler: the caller builds that from Handler.
	Shaping shaping.Downstream
	// Handler is what the downstream's handler is built from.
	Handler Handler
	// Written is the downstream as the file writes it, for status output.
	Written Written
}

// Handler is a downstream's handler as the config describes it
// (downstreams[].handler): exactly one of HTTP, Postgres, Log and Go is
// set.
type Handler struct {
	// HTTP is the config of a shaping.HTTPHandler (type http).
	HTTP *shaping.HTTPConfig
	// Postgres is a batch writer into a table (type postgres).
	Postgres *Postgres
	// Log is a handler that logs each task (type log).
	Log bool
	// Go is a handler the embedding program registers by the
	// downstream's name (type go).
	Go bool
}

// Postgres is a postgres handler: the table its batches go to and where
// its DSN is kept.
type Postgres struct {
	// DSN is the PostgreSQL connection string (dsn_env); it may hold a
	// password. Its Field is relative to the handler: "dsn_env".
	DSN Secret
	// Table, Columns, IDColumn and OnConflict are pgsink.Config's, as
	// the handler's fields of those names write them.
	Table, IDColumn, OnConflict string
	Columns                     map[string]string // payload field → column
	// Timeout bounds one write (handler.timeout).
	Timeout time.Duration
}

// Written is a downstream's rates and limiters in the file's own words.
type Written struct {
	// Rate is the rate as written, e.g. "3000/m".
	Rate string
	// Schedule is how many rate changes its schedule has.
	Schedule int
	// Adaptive is its adaptive rate's bounds; nil when off.
	Adaptive *WrittenAdaptive
	// Limiters are its admission limiters, in order.
	Limiters []WrittenLimiter
}

// WrittenAdaptive is an adaptive rate's bounds as written; Ceiling is ""
// when the file leaves it to the downstream's rate.
type WrittenAdaptive struct {
	Floor, Ceiling string // e.g. "5/s"
}

// WrittenLimiter is an admission limiter as written.
type WrittenLimiter struct {
	// Name, Algorithm, Key and Rate are the limiter's fields of those
	// names, defaults filled.
	Name, Algorithm, Key, Rate string
	// Burst is 0 when the file leaves it out.
	Burst int64
	// Mode is the mode the file gives it (shaper ctl mode may override).
	Mode limiters.Mode
}

// batchLateToleranceCap bounds the late tolerance of a batching
// downstream: a worker more than a second late for its batch's slot
// wastes the slot rather than write.
const batchLateToleranceCap = time.Second

// Build derives the plan from cfg, as Parse or Load return it (defaults
// filled, validated). Its errors name the field, like config's. It reads
// no secret.
func Build(cfg *config.Config) (*Plan, error) {
	p := &Plan{Prefix: cfg.Redis.Prefix, Redis: redisOptions(cfg.Redis), MaxBody: int64(cfg.HTTP.MaxBody),
		Token:     Secret{Field: "http.token_env", Env: cfg.HTTP.TokenEnv},
		Admission: map[string]Admission{}, byName: map[string]int{},
		Dispatcher: shaping.Config{Prefix: cfg.Redis.Prefix, ShutdownTimeout: time.Duration(cfg.ShutdownTimeout),
			RedisTimeout: time.Duration(cfg.Redis.Timeout)},
		Producer: queue.ProducerConfig{Prefix: cfg.Redis.Prefix, MaxPayload: int(cfg.HTTP.MaxBody),
			MaxRetry: map[string]int{}, Retention: map[string]time.Duration{}, Batched: map[string]int{}, MaxCost: map[string]int64{},
			Fair: map[string]queue.FairShare{}, Shaping: map[string]queue.Shaping{}}}
	for i, dc := range cfg.Downstreams {
		sd, err := shapingDownstream(dc)
		if err != nil {
			return nil, fmt.Errorf("config: downstreams[%d].schedule: %w", i, err)
		}
		p.byName[dc.Name] = len(p.Downstreams)
		p.Downstreams = append(p.Downstreams, Downstream{Shaping: sd, Handler: handler(dc), Written: written(dc)})
		p.Producer.Downstreams = append(p.Producer.Downstreams, dc.Name)
		p.Producer.MaxRetry[dc.Name] = dc.MaxRetry
		p.Producer.Retention[dc.Name] = time.Duration(dc.Retention)
		p.Producer.MaxCost[dc.Name] = sd.MaxCost
		p.Producer.Shaping[dc.Name] = producerShaping(dc, sd)
		if dc.Collapse != "" {
			if p.Producer.Collapse == nil {
				p.Producer.Collapse = map[string]queue.Collapse{}
			}
			mode := queue.KeepLast
			if dc.Collapse == config.CollapseKeepFirst {
				mode = queue.KeepFirst
			}
			p.Producer.Collapse[dc.Name] = queue.Collapse{Mode: mode, Window: time.Duration(dc.CollapseWindow)}
		}
		if dc.Priority != nil {
			if p.Producer.Priority == nil {
				p.Producer.Priority = map[string]int{}
			}
			p.Producer.Priority[dc.Name] = dc.Priority.Default
		}
		if sd.Fairness != nil {
			p.Producer.Fair[dc.Name] = queue.FairShare{Fairness: sd.Fairness, Rate: sd.Rate}
		}
		if g := batchGroups(dc); g > 0 {
			p.Producer.Batched[dc.Name] = g
		}
		if a := admission(cfg, dc); a != nil {
			p.Admission[dc.Name] = *a
		}
	}
	if cfg.HTTP.Enabled() {
		p.Listen = cfg.HTTP.Listen
		p.MetricsKeys = cfg.HTTP.MetricsKeys
	}
	jobs, err := cronJobs(cfg)
	if err != nil {
		return nil, err
	}
	p.Cron = jobs
	return p, nil
}

// redisOptions is how to reach the Redis r names; String describes it
// as config.Redis does, without a secret.
func redisOptions(r config.Redis) redisconn.Options {
	o := redisconn.Options{URL: r.URL, Cluster: r.Cluster, Username: r.Username, TLSCAFile: r.TLSCAFile,
		Timeout: time.Duration(r.Timeout), Desc: r.String()}
	if r.Sentinel != nil {
		o.SentinelMaster, o.SentinelAddrs = r.Sentinel.Master, r.Sentinel.Addrs
	}
	field := "redis.password_env"
	if r.PasswordEnv == "" {
		field = "redis.password_file"
	}
	if pw := (Secret{Field: field, Env: r.PasswordEnv, File: r.PasswordFile}); !pw.IsZero() {
		o.Password = pw.Read
	}
	return o
}

// handler is what dc's handler is built from.
func handler(dc config.Downstream) Handler {
	h := dc.Handler
	switch h.Type {
	case config.HandlerHTTP:
		return Handler{HTTP: &shaping.HTTPConfig{URL: h.URL, Method: h.Method, Headers: h.Headers, Timeout: time.Duration(h.Timeout),
			CostHeader: h.CostHeader, CostJSON: h.CostJSON}}
	case config.HandlerPostgres:
		return Handler{Postgres: &Postgres{DSN: Secret{Field: "dsn_env", Env: h.DSNEnv}, Table: h.Table, Columns: h.Columns,
			IDColumn: h.IDColumn, OnConflict: h.OnConflict, Timeout: time.Duration(h.Timeout)}}
	case config.HandlerLog:
		return Handler{Log: true}
	}
	return Handler{Go: true}
}

// written is dc's rates and limiters as the file writes them.
func written(dc config.Downstream) Written {
	w := Written{Rate: dc.Rate.String(), Schedule: len(dc.Schedule)}
	if a := dc.Adaptive; a != nil {
		w.Adaptive = &WrittenAdaptive{Floor: a.Floor.String(), Ceiling: a.Ceiling.String()}
	}
	if dc.Admission != nil {
		for _, lc := range dc.Admission.Limiters {
			w.Limiters = append(w.Limiters, WrittenLimiter{Name: lc.Name, Algorithm: string(lc.Algorithm), Key: string(lc.Key),
				Rate: lc.Rate.String(), Burst: lc.Burst, Mode: lc.Mode.Limiters()})
		}
	}
	return w
}

// Names are the downstreams' names, in the config's order.
func (p *Plan) Names() []string {
	ns := make([]string, 0, len(p.Downstreams))
	for _, d := range p.Downstreams {
		ns = append(ns, d.Shaping.Name)
	}
	return ns
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
		MaxCost: cmp.Or(dc.MaxCost, dc.DefaultMaxCost()), MaxHold: time.Duration(dc.MaxHold), Workers: dc.Workers,
		Schedule: sched, Adaptive: adaptive(dc), Breaker: breaker(dc), Quotas: dc.QuotasModel(),
		Concurrency: dc.Concurrency, KeyConcurrency: dc.KeyConcurrency, LeaseTime: time.Duration(dc.Lease),
		Fairness: dc.Fairness.Model(), ShapingMode: dc.ShapingMode.Limiters()}
	if dc.Priority != nil {
		w, err := priority.WeightsFrom(dc.Priority.Weights)
		if err != nil { // config validated each weight
			return shaping.Downstream{}, fmt.Errorf("downstream %q: %w", dc.Name, err)
		}
		sd.Priority = &shaping.Priority{Default: dc.Priority.Default, Weights: w}
	}
	if rh := dc.RateHeaders; rh != nil {
		m, err := rh.Mapping()
		if err != nil {
			return shaping.Downstream{}, fmt.Errorf("downstream %q: rate_headers: %w", dc.Name, err)
		}
		sd.RateHeaders = []rlheader.Mapping{m}
	}
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

// breaker is dc's circuit breaker (nil when off), defaults filled.
func breaker(dc config.Downstream) *shaping.Breaker {
	b := dc.Breaker
	if b == nil {
		return nil
	}
	s := b.Spec()
	return &s
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
			Downstream: j.Downstream, Type: j.Type, Payload: payload, Key: j.Key, Cost: j.Cost, Priority: j.Priority}})
	}
	return out, nil
}

// producerShaping is what the producer needs of dc's shaping to predict a
// task's start and apply its on_late.
func producerShaping(dc config.Downstream, sd shaping.Downstream) queue.Shaping {
	sh := queue.Shaping{Rate: dc.Limit(), MaxWait: sd.MaxWait, Batch: sd.Batch != nil}
	if dc.OnLate == config.LateReject {
		sh.OnLate = queue.LateReject
	}
	// A downstream held by a spent quota or by an announced limit (the
	// http handler reads them, and bounds its own calls) may hold a task
	// for up to a day; its attempt must outlast that.
	if len(sd.Quotas) > 0 || dc.Handler.Type == config.HandlerHTTP {
		sh.HoldTimeout = HoldTimeout
	}
	return sh
}

// HoldTimeout is the attempt timeout of tasks (that set none) on
// downstreams that may be held for long: a day (shaping.MaxInterval, the
// longest any hold may push the bucket) plus an hour.
const HoldTimeout = shaping.MaxInterval + time.Hour
