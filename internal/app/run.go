package app

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/metrics"
	"github.com/shaper-io/shaper/internal/plan"
	"github.com/shaper-io/shaper/internal/server"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// Options tunes Run for embedding and tests.
type Options struct {
	// Logger; nil means JSON lines on stderr at info level.
	Logger *slog.Logger
	// Handlers serves downstreams whose handler type is "go", by name.
	Handlers map[string]shaping.HandlerFunc
	// OnReady, when set, is called once everything runs, with the HTTP
	// address ("" when the HTTP server is off).
	OnReady func(httpAddr string)
	// ListenFrom names where the config's http.listen came from, for the
	// error when its address is taken; "" means "http.listen".
	ListenFrom string
}

// RunConfigFile loads the config at path and runs shaper until ctx ends.
// A listen with an address replaces the file's http.listen: every process
// of a host runs the same file, each on its own address.
func RunConfigFile(ctx context.Context, path string, listen Listen) error {
	cfg, err := config.Load(path)
	if err != nil {
		return err
	}
	from := "http.listen in " + path
	if listen.Addr != "" {
		cfg.HTTP.Listen, from = listen.Addr, listen.From
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("%s: %w", listen.From, err)
		}
	}
	return Run(ctx, cfg, Options{ListenFrom: from})
}

// Run runs the dispatcher and the HTTP surface for cfg until ctx ends, then
// shuts down gracefully. Every config error is reported before anything
// starts.
func Run(ctx context.Context, cfg *config.Config, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	log = useLogger(log)
	pl, err := plan.Build(cfg)
	if err != nil {
		return err
	}
	return runPlan(ctx, pl, opts, log)
}

// runPlan is Run after the plan is built: nothing below reads the config.
func runPlan(ctx context.Context, pl *plan.Plan, opts Options, log *slog.Logger) error {
	token, err := pl.Token.Read()
	if err != nil {
		return err
	}
	rdb, closeRedis, err := OpenRedis(pl.Redis)
	if err != nil {
		return err
	}
	defer closeRedis()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(reg)

	pg := newPostgresSinks(rdb, pl.Prefix, log)
	defer pg.Close()
	d, err := newDispatcher(ctx, rdb, pl, opts.Handlers, log, reg, pg)
	if err != nil {
		return err
	}
	pl.Producer.Predict = true // the HTTP API's 202 says when a task should start
	producer, err := pl.NewProducer(rdb, reg)
	if err != nil {
		return err
	}
	defer producer.Close()
	inspector := queue.NewInspector(rdb, pl.Prefix)

	var srv *server.Server
	addr := ""
	if pl.Listen != "" {
		srv = server.New(server.Options{Addr: pl.Listen, Registry: reg, Redis: rdb, Token: token, MetricsKeys: pl.MetricsKeys, Logger: log})
		mountAPI(srv, producer, d, inspector, rdb, pl.Prefix, pl.Names(), pl.MaxBody, log)
		mountControl(srv, d, inspector, pl)
		mountKeyControl(srv, d, pl)
		mountStatus(ctx, srv, d, pl, reg, rdb)
		if addr, err = srv.Start(); err != nil {
			return addrInUse(err, pl.Listen, cmp.Or(opts.ListenFrom, "http.listen"))
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Shutdown(sctx)
		}()
	}

	if warn, err := checkRedisAtStart(rdb, pl.Redis, 5*time.Second); err != nil {
		return err
	} else if warn != nil {
		log.Warn("redis is not answering yet; workers will hold off until it does", "redis", pl.Redis.String(), "err", warn)
	}
	if err := d.Start(); err != nil {
		return err
	}
	go collectBacklog(ctx, inspector, d, m)
	if len(pl.Cron) > 0 {
		go queue.NewCron(rdb, producer, queue.CronConfig{Prefix: pl.Prefix, Jobs: pl.Cron, Logger: log, Registerer: reg}).Run(ctx)
	}
	log.Info("shaper started", "redis", pl.Redis.String(), "http", addr, "downstreams", len(pl.Downstreams))
	for _, ds := range d.Downstreams() {
		log.Info("downstream", "name", ds.Name, "rate", ds.Rate.RateString(), "burst", max(ds.Burst, 1),
			"max_wait", ds.MaxWait.String(), "workers", ds.Workers)
	}
	if opts.OnReady != nil {
		opts.OnReady(addr)
	}
	<-ctx.Done()
	log.Info("shutting down: no new tasks; releases in flight may finish", "timeout", pl.Dispatcher.ShutdownTimeout.String())
	err = shutdownWithin(d, pl.Dispatcher.ShutdownTimeout+shutdownMargin, log)
	log.Info("stopped")
	return err
}

// shutdownMargin is what a shutdown may take past shutdown_timeout: the
// returns of held tasks to their queues after releases in flight finish.
const shutdownMargin = 2 * time.Second

// shutdownWithin runs d.Shutdown but gives up after limit: with Redis
// unreachable, asynq's components each wait out their own Redis calls and
// a shutdown could take many times the configured timeout. Tasks a process
// still held when it gave up are not lost: their leases expire and any
// process's recoverer puts them back.
func shutdownWithin(d *shaping.Dispatcher, limit time.Duration, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.Shutdown(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		log.Error("shutdown did not finish in time; held tasks come back when their leases expire", "after", limit.String())
		return fmt.Errorf("shutdown did not finish within %s", limit)
	}
}

// newDispatcher builds the dispatcher of pl, each downstream with its
// handler.
func newDispatcher(ctx context.Context, rdb redis.UniversalClient, pl *plan.Plan, gos map[string]shaping.HandlerFunc,
	log *slog.Logger, reg prometheus.Registerer, pg *postgresSinks) (*shaping.Dispatcher, error) {
	dcfg := pl.Dispatcher
	dcfg.Logger, dcfg.Registerer = log, reg
	d := shaping.New(rdb, dcfg)
	for i, pd := range pl.Downstreams {
		ds := pd.Shaping
		var err error
		if ds.Handler, err = handlerFor(ctx, pd, gos, log, pg); err != nil {
			return nil, fmt.Errorf("config: downstreams[%d].handler: %w", i, err)
		}
		if err := d.Add(ds); err != nil {
			return nil, fmt.Errorf("config: downstreams[%d]: %w", i, err)
		}
	}
	return d, nil
}

func handlerFor(ctx context.Context, pd plan.Downstream, gos map[string]shaping.HandlerFunc, log *slog.Logger, pg *postgresSinks) (shaping.HandlerFunc, error) {
	name := pd.Shaping.Name
	switch h := pd.Handler; {
	case h.Postgres != nil:
		return pg.handler(ctx, name, *h.Postgres)
	case h.HTTP != nil:
		return shaping.HTTPHandler(*h.HTTP), nil
	case h.Log:
		return shaping.LogHandler(func(format string, args ...any) { log.Info(fmt.Sprintf(format, args...)) }), nil
	}
	if h, ok := gos[name]; ok {
		return h, nil
	}
	// The shaper binary registers none: type go is for programs that
	// embed shaper (app.Run with Options.Handlers).
	return nil, fmt.Errorf(`type "go" needs a Go program that embeds shaper and registers a handler for %q (app.Options.Handlers; a Go handler: examples/batchwrites); the shaper command has none, use type http or log`, name)
}

// backlogInterval spaces the backlog gauges' samples (five commands per
// downstream per sample, in every process): every 5s for a few
// downstreams, stretched with their number up to every 15s (Prometheus's
// default scrape interval), so that 100 or more cost a third of a command
// per downstream per second.
func backlogInterval(downstreams int) time.Duration {
	return min(max(5*time.Second, time.Duration(downstreams)*150*time.Millisecond), 15*time.Second)
}

func collectBacklog(ctx context.Context, in *queue.Inspector, d *shaping.Dispatcher, m *metrics.Metrics) {
	t := time.NewTicker(backlogInterval(len(d.Downstreams())))
	defer t.Stop()
	for {
		for _, ds := range d.Downstreams() {
			b, err := in.Counts(ctx, ds.Name)
			if err != nil {
				continue
			}
			for state, v := range map[string]int{"pending": b.Pending, "active": b.Active, "scheduled": b.Scheduled,
				"retry": b.Retry, "archived": b.Archived} {
				m.Backlog.WithLabelValues(ds.Name, state).Set(float64(v))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
