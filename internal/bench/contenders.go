package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// Contender ids, as the -contenders flag takes them.
const (
	Shaper = "shaper"
	// Recipe is asynq's wiki recipe as written: a per-process
	// rate.NewLimiter(R, 3R) (the wiki's 10/s with burst 30, scaled).
	Recipe = "recipe"
	// RecipeBurst1 is the recipe with the tightest limiter, burst 1.
	RecipeBurst1 = "recipe-burst1"
	// RedisRate gates asynq with redis_rate.PerSecond(R) (burst R), one
	// global key.
	RedisRate = "redis_rate"
	// RedisRateBurst1 is the same with burst 1.
	RedisRateBurst1 = "redis_rate-burst1"
	Raw             = "raw"
)

// AllContenders lists the contender ids in table order.
func AllContenders() []string {
	return []string{Shaper, Recipe, RecipeBurst1, RedisRate, RedisRateBurst1, Raw}
}

var contenderNames = map[string]string{
	Shaper:          "shaper",
	Recipe:          "asynq + x/time/rate recipe (burst 3R)",
	RecipeBurst1:    "asynq + x/time/rate recipe, burst 1",
	RedisRate:       "asynq + redis_rate (GCRA, burst R)",
	RedisRateBurst1: "asynq + redis_rate (GCRA), burst 1",
	Raw:             "asynq, no limit",
}

// burstOne reports whether id is a burst-1 variant: those cannot keep up
// (see docs/benchmarks.md), so they run at the first process count only
// and for a capped time.
func burstOne(id string) bool { return id == RecipeBurst1 || id == RedisRateBurst1 }

// downstream is the one downstream every fidelity run feeds.
const downstream = "api"

// fleet is P running "processes" of one contender.
type fleet interface {
	stop(ctx context.Context) error
}

// shaperFleet runs shaper, either as real `shaper` OS processes from a
// YAML config or as separate Dispatchers (each with its own Redis client)
// in this process.
type shaperFleet struct {
	procs   []*exec.Cmd
	done    []chan error
	stderr  []*syncBuffer
	metrics []string // /metrics URL of each process
	ds      []*shaping.Dispatcher
	regs    []*prometheus.Registry
	rdbs    []*redis.Client
}

func (e *env) startShaper(ctx context.Context, prefix string, p int, sinkURL string) (*shaperFleet, error) {
	o := e.opts
	f := &shaperFleet{}
	if o.ShaperMode == ModeDispatchers {
		for i := 0; i < p; i++ {
			rdb := redis.NewClient(&redis.Options{Addr: e.addr, ContextTimeoutEnabled: true})
			reg := prometheus.NewRegistry()
			f.regs = append(f.regs, reg)
			d := shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: slog.New(slog.DiscardHandler), ShutdownTimeout: 5 * time.Second,
				Registerer: reg})
			err := d.Add(shaping.Downstream{Name: downstream, Rate: limiters.PerSecond(int64(o.Rate)), Workers: o.Workers,
				MaxWait: time.Second, Handler: shaping.HTTPHandler(shaping.HTTPConfig{URL: sinkURL, Timeout: 5 * time.Second})})
			if err == nil {
				err = d.Start()
			}
			f.rdbs = append(f.rdbs, rdb)
			if err != nil {
				f.stop(ctx)
				return nil, err
			}
			f.ds = append(f.ds, d)
		}
		return f, nil
	}
	for i := 0; i < p; i++ {
		// Each process serves /metrics on its own port, so the run can
		// read how many slots it wasted.
		port, err := redistest.FreePort()
		if err != nil {
			f.stop(ctx)
			return nil, err
		}
		cfg := fmt.Sprintf(`redis: {url: "redis://%s", prefix: %q}
http: {listen: "127.0.0.1:%d"}
shutdown_timeout: 5s
downstreams:
  - name: %s
    rate: %d/s
    workers: %d
    max_wait: 1s
    handler: {type: http, url: %q, timeout: 5s}
`, e.addr, prefix, port, downstream, o.Rate, o.Workers, sinkURL)
		path := filepath.Join(e.tmp, fmt.Sprintf("%s-%d.yaml", prefix, i))
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			f.stop(ctx)
			return nil, err
		}
		f.metrics = append(f.metrics, fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
		buf := &syncBuffer{}
		if _, err := f.spawn(e.shaperBin, path, buf, buf); err != nil {
			f.stop(ctx)
			return nil, err
		}
	}
	return f, nil
}

// spawn starts a shaper process on the config at path, its stderr written
// to stderr, whose tail is kept (for errors); stop ends it.
func (f *shaperFleet) spawn(bin, path string, stderr io.Writer, tail *syncBuffer) (*exec.Cmd, error) {
	cmd := exec.Command(bin, "-config", path)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start %s: %w", bin, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	f.procs, f.done, f.stderr = append(f.procs, cmd), append(f.done, done), append(f.stderr, tail)
	return cmd, nil
}

// counter sums a shaper counter (e.g. "shaper_shaping_late_skips_total")
// over every process of the fleet; -1 if it could not be read.
func (f *shaperFleet) counter(ctx context.Context, name string) float64 {
	total := 0.0
	for _, reg := range f.regs {
		mfs, err := reg.Gather()
		if err != nil {
			return -1
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				for _, m := range mf.GetMetric() {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	for _, u := range f.metrics {
		v, err := scrapeCounter(ctx, u, name)
		if err != nil {
			return -1
		}
		total += v
	}
	return total
}

// scrapeCounter sums the samples of counter name in a Prometheus text
// exposition at url.
func scrapeCounter(ctx context.Context, url, name string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	total := 0.0
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, name+"{") && !strings.HasPrefix(l, name+" ") {
			continue
		}
		f := strings.Fields(l)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			total += v
		}
	}
	return total, nil
}

func (f *shaperFleet) stop(ctx context.Context) error {
	var errs []error
	for _, d := range f.ds {
		if err := d.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	for _, r := range f.rdbs {
		r.Close()
	}
	for _, c := range f.procs {
		c.Process.Signal(syscall.SIGTERM)
	}
	for i, c := range f.procs {
		select {
		case err := <-f.done[i]:
			if err != nil {
				errs = append(errs, fmt.Errorf("shaper pid %d: %w; stderr tail: %s", c.Process.Pid, err, tail(f.stderr[i].String(), 500)))
			}
		case <-time.After(20 * time.Second):
			c.Process.Kill()
			<-f.done[i]
			errs = append(errs, fmt.Errorf("shaper pid %d did not stop within 20s of SIGTERM", c.Process.Pid))
		}
	}
	return errors.Join(errs...)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// RateLimitError is the asynq rate-limit recipe's error: the handler
// returns it when the limiter says no, IsFailure answers false for it (so
// the retry does not count as a failure) and RetryDelayFunc reads RetryIn.
type RateLimitError struct {
	RetryIn time.Duration
}

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("rate limited (retry in %v)", e.RetryIn)
}

func isRateLimitError(err error) bool {
	var rl *RateLimitError
	return errors.As(err, &rl)
}

func retryDelay(n int, err error, t *asynq.Task) time.Duration {
	var rl *RateLimitError
	if errors.As(err, &rl) {
		return rl.RetryIn
	}
	return asynq.DefaultRetryDelayFunc(n, err, t)
}

// asynqFleet is P asynq servers hosted in this process, each with its own
// Redis connection pool (and, for the recipe, its own limiter).
type asynqFleet struct {
	srvs []*asynq.Server
	rdbs []*redis.Client
}

func (f *asynqFleet) stop(context.Context) error {
	for _, s := range f.srvs {
		s.Shutdown()
	}
	for _, r := range f.rdbs {
		r.Close()
	}
	return nil
}

// deliverer sends a task to the sink with the same HTTP code shaper uses,
// so every contender's releases are timed at the same point.
func deliverer(sinkURL string) func(ctx context.Context, t *asynq.Task) error {
	h := shaping.HTTPHandler(shaping.HTTPConfig{URL: sinkURL, Timeout: 5 * time.Second})
	return func(ctx context.Context, t *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		return h(ctx, &shaping.Task{ID: id, Type: t.Type(), Payload: t.Payload(), Downstream: downstream, Cost: 1})
	}
}

// asynqConfig is the server config of every asynq-hosted contender: the
// recipe's IsFailure and RetryDelayFunc, and the same polling intervals
// shaper's dispatcher gives its own asynq servers (tasks checked every
// 100ms when idle, scheduled and retry tasks forwarded every second), so
// the comparison is between limiting strategies, not asynq settings.
func (e *env) asynqConfig(q string) asynq.Config {
	return asynq.Config{
		Concurrency:              e.opts.Workers,
		Queues:                   map[string]int{q: 1},
		TaskCheckInterval:        100 * time.Millisecond,
		DelayedTaskCheckInterval: time.Second,
		ShutdownTimeout:          2 * time.Second,
		IsFailure:                func(err error) bool { return !isRateLimitError(err) },
		RetryDelayFunc:           retryDelay,
		Logger:                   quietLogger{},
		LogLevel:                 asynq.FatalLevel,
	}
}

func (e *env) startAsynq(id, prefix string, p int, sinkURL string) (*asynqFleet, error) {
	q := prefix + ":" + downstream
	f := &asynqFleet{}
	for i := 0; i < p; i++ {
		rdb := redis.NewClient(&redis.Options{Addr: e.addr, ContextTimeoutEnabled: true})
		f.rdbs = append(f.rdbs, rdb)
		deliver := deliverer(sinkURL)
		var h asynq.HandlerFunc
		switch id {
		case Recipe, RecipeBurst1:
			// Per process, as the recipe has it.
			burst := 3 * e.opts.Rate
			if id == RecipeBurst1 {
				burst = 1
			}
			lim := rate.NewLimiter(rate.Limit(e.opts.Rate), burst)
			maxRetry := max(int(e.opts.RecipeRetryMax/time.Second), 1)
			h = func(ctx context.Context, t *asynq.Task) error {
				if !lim.Allow() {
					return &RateLimitError{RetryIn: time.Duration(rand.IntN(maxRetry)) * time.Second}
				}
				return deliver(ctx, t)
			}
		case RedisRate, RedisRateBurst1:
			// One global GCRA key in Redis.
			rl := redis_rate.NewLimiter(rdb)
			lim := redis_rate.PerSecond(e.opts.Rate)
			if id == RedisRateBurst1 {
				lim.Burst = 1
			}
			key := prefix + ":" + downstream
			h = func(ctx context.Context, t *asynq.Task) error {
				res, err := rl.Allow(ctx, key, lim)
				if err != nil {
					return err
				}
				if res.Allowed == 0 {
					return &RateLimitError{RetryIn: res.RetryAfter}
				}
				return deliver(ctx, t)
			}
		case Raw:
			h = deliver
		default:
			f.stop(context.Background())
			return nil, fmt.Errorf("bench: unknown asynq contender %q", id)
		}
		srv := asynq.NewServerFromRedisClient(rdb, e.asynqConfig(q))
		if err := srv.Start(h); err != nil {
			f.stop(context.Background())
			return nil, err
		}
		f.srvs = append(f.srvs, srv)
	}
	return f, nil
}

// enqueueBacklog enqueues n tasks {"n":i} in order, the shaper way
// (queue.Producer) or the asynq way (asynq.Client), into the run's queue.
func (e *env) enqueueBacklog(ctx context.Context, id, prefix string, n int) error {
	if id == Shaper {
		p := queue.NewProducer(e.rdb, queue.ProducerConfig{Prefix: prefix})
		defer p.Close()
		for i := 0; i < n; i++ {
			if _, err := p.Enqueue(ctx, queue.Task{Downstream: downstream, Payload: payload(i)}); err != nil {
				return err
			}
		}
		return nil
	}
	c := asynq.NewClientFromRedisClient(e.rdb)
	defer c.Close()
	q := prefix + ":" + downstream
	for i := 0; i < n; i++ {
		if _, err := c.EnqueueContext(ctx, asynq.NewTask("bench", payload(i)), asynq.Queue(q)); err != nil {
			return err
		}
	}
	return nil
}

func payload(i int) []byte { return fmt.Appendf(nil, `{"n":%d}`, i) }

// seqOf reads i back from payload(i); -1 if it is not one.
func seqOf(p string) int {
	s, ok := strings.CutPrefix(p, `{"n":`)
	if !ok {
		return -1
	}
	s, ok = strings.CutSuffix(s, "}")
	if !ok {
		return -1
	}
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// quietLogger drops asynq's own log lines (rate-limit retries would flood
// the output).
type quietLogger struct{}

func (quietLogger) Debug(...any) {}
func (quietLogger) Info(...any)  {}
func (quietLogger) Warn(...any)  {}
func (quietLogger) Error(...any) {}
func (quietLogger) Fatal(...any) {}
