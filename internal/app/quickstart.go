package app

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/metrics"
	"github.com/shaper-io/shaper/internal/plan"
	"github.com/shaper-io/shaper/internal/server"
	"github.com/shaper-io/shaper/internal/statuspage"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// QuickStartOptions configures QuickStart.
type QuickStartOptions struct {
	// Listen is the HTTP address for /metrics; "" means 127.0.0.1:8080,
	// falling back to a free port when that is taken.
	Listen string
	// ListenFrom names where Listen came from, for the error when its
	// address is taken; "" means "-listen".
	ListenFrom string
	// Rate is the demo downstream's rate; zero means 5/s.
	Rate limiters.Limit
	// ProduceEvery is the demo producer's pace; zero means 100ms (10/s,
	// twice the rate, so a backlog builds and the shaping shows).
	ProduceEvery time.Duration
}

// QuickStart runs shaper with nothing installed: an embedded in-process
// Redis (miniredis), a demo downstream that logs each release, and a demo
// producer that enqueues faster than the downstream's rate through a
// per-tenant token bucket. It prints what happens once a second until ctx
// ends. The embedded Redis is for this demo only; correctness tests run on
// a real redis-server.
func QuickStart(ctx context.Context, out io.Writer, opts QuickStartOptions) error {
	if opts.Rate.IsZero() {
		opts.Rate = limiters.PerSecond(5)
	}
	if opts.ProduceEvery <= 0 {
		opts.ProduceEvery = 100 * time.Millisecond
	}
	addr, stopRedis, err := StartEmbedded()
	if err != nil {
		return fmt.Errorf("quickstart: %w", err)
	}
	defer stopRedis()

	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	reg := prometheus.NewRegistry()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	var mu sync.Mutex
	var released atomic.Int64
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, time.Now().Format("15:04:05.000")+" "+format+"\n", args...)
	}
	release := shaping.LogHandler(logf)
	pl, err := plan.Build(demoConfig(opts.Rate))
	if err != nil {
		return err
	}
	d, p, err := startDemo(rdb, pl, reg, quiet, func(ctx context.Context, t *shaping.Task) error {
		released.Add(1)
		return release(ctx, t)
	})
	if err != nil {
		return err
	}
	defer p.Close()

	srv := server.New(server.Options{Addr: opts.Listen, Registry: reg, Redis: rdb, Logger: quiet})
	httpAddr, err := srv.Start()
	if err != nil && opts.Listen == "" {
		srv = server.New(server.Options{Addr: "127.0.0.1:0", Registry: reg, Redis: rdb, Logger: quiet})
		httpAddr, err = srv.Start()
	}
	if err != nil {
		return addrInUse(err, opts.Listen, cmp.Or(opts.ListenFrom, "-listen"))
	}
	defer srv.Shutdown(context.Background())
	page := statuspage.New(statuspage.Options{Gatherer: reg, Dispatcher: d, Plan: pl})
	page.Mount(srv)
	go page.Run(ctx)

	if err := d.Start(); err != nil {
		return err
	}
	logf("shaper quick start: embedded Redis at %s (demo only; set a config file for a real Redis)", addr)
	logf("downstream %q releases at %s; two tenants enqueue every %s through a token bucket of 4/s (burst 8) each", "demo", opts.Rate.RateString(), opts.ProduceEvery)
	logf("status page: http://%s/   metrics: http://%s/metrics   stop: Ctrl-C", httpAddr, httpAddr)

	var admitted, rejected atomic.Int64
	go produceDemo(ctx, p, opts.ProduceEvery, &admitted, &rejected)
	in := queue.NewInspector(rdb, "")
	go collectBacklog(ctx, in, d, metrics.New(reg)) // the page's backlog, as Run keeps it
	return summarize(ctx, d, in, logf, opts.Rate, &released, &admitted, &rejected)
}

// produceDemo enqueues a task every every, for two tenants in turn,
// counting what admission admits and rejects, until ctx ends.
func produceDemo(ctx context.Context, p *queue.Producer, every time.Duration, admitted, rejected *atomic.Int64) {
	t := time.NewTicker(every)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		tenant := []string{"tenant-a", "tenant-b"}[i%2]
		_, err := p.Enqueue(ctx, queue.Task{Downstream: "demo", Key: tenant, Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))})
		if err != nil {
			rejected.Add(1)
		} else {
			admitted.Add(1)
		}
	}
}

// demoConfig is the quick start as a config, as shaper.yaml would write
// it: the status page names the limiter's algorithm, key and rate from it.
func demoConfig(rate limiters.Limit) *config.Config {
	tenantLimit := limiters.PerSecond(4).WithBurst(8)
	return &config.Config{Downstreams: []config.Downstream{{Name: "demo", Rate: config.RateOf(rate),
		MaxWait: config.Duration(2 * time.Second), MaxRetry: config.DefaultMaxRetry, Admission: &config.Admission{
			Limiters: []config.Limiter{{Name: "demo-tenant", Algorithm: limiters.TokenBucket, Key: config.KeyTenant,
				Rate: config.RateOf(tenantLimit), Burst: tenantLimit.Burst}}}}}}
}

// startDemo builds the dispatcher and the producer of the demo's plan, as
// Run does, with h as the demo downstream's handler.
func startDemo(rdb redis.UniversalClient, pl *plan.Plan, reg prometheus.Registerer, quiet *slog.Logger, h shaping.HandlerFunc) (*shaping.Dispatcher, *queue.Producer, error) {
	dcfg := pl.Dispatcher
	dcfg.Logger, dcfg.Registerer = quiet, reg
	d := shaping.New(rdb, dcfg)
	demo := pl.Downstreams[0].Shaping
	demo.Handler = h
	if err := d.Add(demo); err != nil {
		return nil, nil, err
	}
	pl.Producer.Logger = quiet
	p, err := pl.NewProducer(rdb, reg)
	if err != nil {
		return nil, nil, err
	}
	return d, p, nil
}

// summarize prints a line a second about the demo until ctx ends, then
// shuts the dispatcher down.
func summarize(ctx context.Context, d *shaping.Dispatcher, in *queue.Inspector, logf func(string, ...any), rate limiters.Limit,
	released, admitted, rejected *atomic.Int64) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := int64(0)
	for {
		select {
		case <-ctx.Done():
			logf("stopping: returning held tasks to the queue")
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return d.Shutdown(sctx)
		case <-t.C:
			b, _ := in.Backlog("demo")
			n := released.Load()
			logf("summary: released %d in the last second (rate %s) · backlog %d · admitted %d · rejected %d",
				n-last, rate.RateString(), b.Total(), admitted.Load(), rejected.Load())
			last = n
		}
	}
}
