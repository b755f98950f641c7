package app

import (
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
	d := shaping.New(rdb, shaping.Config{Logger: quiet, Registerer: reg})
	release := shaping.LogHandler(logf)
	if err := d.Add(shaping.Downstream{Name: "demo", Rate: opts.Rate, MaxWait: 2 * time.Second,
		Handler: func(ctx context.Context, t *shaping.Task) error {
			released.Add(1)
			return release(ctx, t)
		}}); err != nil {
		return err
	}
	tenantLimit := limiters.PerSecond(4).WithBurst(8)
	tb, err := limiters.New(rdb, limiters.Config{Name: "demo-tenant", Algorithm: limiters.TokenBucket, Limit: tenantLimit})
	if err != nil {
		return err
	}
	p := queue.NewProducer(rdb, queue.ProducerConfig{Registerer: reg, Logger: quiet,
		Admission: map[string]queue.Admission{"demo": {Limiter: tb}}})
	defer p.Close()

	srv := server.New(server.Options{Addr: opts.Listen, Registry: reg, Redis: rdb, Logger: quiet})
	httpAddr, err := srv.Start()
	if err != nil && opts.Listen == "" {
		srv = server.New(server.Options{Addr: "127.0.0.1:0", Registry: reg, Redis: rdb, Logger: quiet})
		httpAddr, err = srv.Start()
	}
	if err != nil {
		return err
	}
	defer srv.Shutdown(context.Background())
	// The page reads the demo's limiter from a config, as it would from
	// shaper.yaml, so the admission row names its algorithm, key and rate.
	page := statuspage.New(statuspage.Options{Gatherer: reg, Dispatcher: d, Config: &config.Config{
		Downstreams: []config.Downstream{{Name: "demo", Rate: opts.Rate.RateString(), Admission: &config.Admission{
			Limiters: []config.Limiter{{Name: "demo-tenant", Algorithm: limiters.TokenBucket, Key: config.KeyTenant,
				Rate: tenantLimit.RateString(), Burst: tenantLimit.Burst}}}}}}})
	page.Mount(srv)
	go page.Run(ctx)

	if err := d.Start(); err != nil {
		return err
	}
	logf("shaper quick start: embedded Redis at %s (demo only; set a config file for a real Redis)", addr)
	logf("downstream %q releases at %s; two tenants enqueue every %s through a token bucket of 4/s (burst 8) each", "demo", opts.Rate.RateString(), opts.ProduceEvery)
	logf("status page: http://%s/   metrics: http://%s/metrics   stop: Ctrl-C", httpAddr, httpAddr)

	var admitted, rejected atomic.Int64
	go func() {
		t := time.NewTicker(opts.ProduceEvery)
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
	}()
	in := queue.NewInspector(rdb, "")
	go collectBacklog(ctx, in, d, metrics.New(reg)) // the page's backlog, as Run keeps it
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
				n-last, opts.Rate.RateString(), b.Total(), admitted.Load(), rejected.Load())
			last = n
		}
	}
}
