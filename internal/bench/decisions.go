package bench

import (
	"context"
	"encoding/csv"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/shaping"
)

// decideFunc makes one decision for key.
type decideFunc func(ctx context.Context, key string) error

// decider is one contender of the decision scenarios, bound to a client by
// mk (so its script call can be captured on a client with a hook).
type decider struct {
	name  string
	limit string
	mk    func(rdb *redis.Client) decideFunc
}

func limiterDecider(alg limiters.Algorithm, prefix string, l limiters.Limit, cost int64, name string) decider {
	if name == "" {
		name = string(alg)
	}
	return decider{name: name, limit: l.String(), mk: func(rdb *redis.Client) decideFunc {
		lim, err := limiters.New(rdb, limiters.Config{Name: "bench", Algorithm: alg, Limit: l, Prefix: prefix})
		if err != nil {
			return func(context.Context, string) error { return err }
		}
		return func(ctx context.Context, key string) error {
			_, err := lim.Allow(ctx, key, cost)
			return err
		}
	}}
}

func subWindowDecider(prefix string, l limiters.Limit, n int, name string) decider {
	return decider{name: name, limit: l.String(), mk: func(rdb *redis.Client) decideFunc {
		lim, err := limiters.New(rdb, limiters.Config{Name: "bench", Algorithm: limiters.SlidingCounter, Limit: l,
			SubWindows: n, Prefix: prefix})
		if err != nil {
			return func(context.Context, string) error { return err }
		}
		return func(ctx context.Context, key string) error {
			_, err := lim.Allow(ctx, key, 1)
			return err
		}
	}}
}

func redisRateDecider(prefix string, l redis_rate.Limit) decider {
	return decider{name: "redis_rate (GCRA)", limit: l.String(), mk: func(rdb *redis.Client) decideFunc {
		rl := redis_rate.NewLimiter(rdb)
		return func(ctx context.Context, key string) error {
			_, err := rl.Allow(ctx, prefix+":"+key, l)
			return err
		}
	}}
}

func shapingDecider(prefix string, l limiters.Limit) decider {
	return decider{name: "shaping reserve (next_free)", limit: l.RateString() + " per bucket", mk: func(rdb *redis.Client) decideFunc {
		b := shaping.NewBuckets(rdb, prefix)
		return func(ctx context.Context, key string) error {
			_, err := b.Reserve(ctx, shaping.Bucket{Name: key, Rate: l}, 1, -1)
			return err
		}
	}}
}

// captureHook records the arguments of the last EVALSHA sent.
type captureHook struct {
	mu   sync.Mutex
	last []any
}

func (h *captureHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *captureHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *captureHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.EqualFold(cmd.Name(), "evalsha") {
			h.mu.Lock()
			h.last = slices.Clone(cmd.Args())
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

// probeKey is the key a captured script call is made for; templates
// replace it with the real key.
const probeKey = "PROBEKEY"

// capture makes d's decision for probeKey twice (the first may go out as
// EVAL while the script is loaded) and returns the EVALSHA's arguments:
// evalsha, sha, numkeys, KEYS[1], ARGV... The key is argument 3.
func (e *env) capture(ctx context.Context, d decider) ([]any, error) {
	rdb := redis.NewClient(&redis.Options{Addr: e.addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	h := &captureHook{}
	rdb.AddHook(h)
	f := d.mk(rdb)
	for i := 0; i < 2; i++ {
		if err := f(ctx, probeKey); err != nil {
			return nil, fmt.Errorf("bench: %s: %w", d.name, err)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.last) < 4 || !strings.Contains(fmt.Sprint(h.last[3]), probeKey) {
		return nil, fmt.Errorf("bench: %s: no EVALSHA for %s captured (got %v)", d.name, probeKey, h.last)
	}
	return h.last, nil
}

// withKey returns the template's arguments for key k.
func withKey(tmpl []any, k string) []any {
	a := slices.Clone(tmpl)
	a[3] = strings.Replace(fmt.Sprint(a[3]), probeKey, k, 1)
	return a
}

// DecisionRow is scenario 3: decisions per second for one limiter at 1, 16
// and 64 goroutines, and redis-benchmark's EVALSHA rate for the same
// script and arguments at 64 connections.
type DecisionRow struct {
	Limiter string             `json:"limiter"`
	Limit   string             `json:"limit"`
	PerSec  map[string]float64 `json:"decisions_per_s"` // "g=1", "g=16", "g=64"
	// Unpipelined is redis-benchmark -c 64 -P 1: EVALSHA of the same
	// script with the same arguments over the same 1,000 keys, one call
	// in flight per connection, as go-redis at g=64 but from a C client.
	Unpipelined float64 `json:"redis_benchmark_evalsha_per_s"`
	// Ceiling is the same with -P 16 (16 calls in flight per
	// connection): what the server itself can execute, the upper bound
	// for any client on this machine. 0 when redis-benchmark is missing
	// or failed (CeilingNote says why).
	Ceiling     float64 `json:"redis_benchmark_pipelined_per_s"`
	CeilingNote string  `json:"redis_benchmark_note,omitempty"`
	Error       string  `json:"error,omitempty"`
}

var concurrencies = []int{1, 16, 64}

func (e *env) decisions(ctx context.Context) []DecisionRow {
	const nkeys = 1000
	prefix := e.prefix("dec")
	var ds []decider
	for _, alg := range limiters.Algorithms() {
		ds = append(ds, limiterDecider(alg, prefix, limiters.PerSecond(100_000), 1, ""))
	}
	ds = append(ds, redisRateDecider(prefix, redis_rate.PerSecond(100_000)),
		shapingDecider(prefix, limiters.PerSecond(1_000_000)))
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprint("user-", i)
	}
	// Interleaved: every round times every decider at every concurrency,
	// so load from elsewhere on the machine hits all of them alike.
	fs := make([]decideFunc, len(ds))
	rows := make([]DecisionRow, len(ds))
	samples := make([]map[int][]float64, len(ds))
	ceil := make([][]float64, len(ds))
	unpiped := make([][]float64, len(ds))
	tmpls := make([][]any, len(ds))
	for i, d := range ds {
		fs[i] = d.mk(e.rdb)
		rows[i] = DecisionRow{Limiter: d.name, Limit: d.limit, PerSec: map[string]float64{}}
		samples[i] = map[int][]float64{}
		var err error
		if tmpls[i], err = e.capture(ctx, d); err != nil {
			rows[i].CeilingNote = err.Error()
		}
	}
	for r := 0; r < e.opts.DecisionRounds; r++ {
		for i := range ds {
			for _, g := range concurrencies {
				if rows[i].Error != "" {
					break
				}
				f := fs[i]
				n, err := timedLoop(ctx, g, e.opts.DecisionTime, func(ctx context.Context, j int) error { return f(ctx, keys[j%nkeys]) })
				if err != nil {
					rows[i].Error = err.Error()
					break
				}
				samples[i][g] = append(samples[i][g], n)
			}
			if tmpls[i] == nil {
				continue
			}
			if c, note := e.evalshaRate(ctx, tmpls[i], nkeys, 1, e.opts.BenchmarkRequests); c > 0 {
				unpiped[i] = append(unpiped[i], c)
			} else {
				rows[i].CeilingNote = note
			}
			if c, note := e.evalshaRate(ctx, tmpls[i], nkeys, 16, 4*e.opts.BenchmarkRequests); c > 0 {
				ceil[i] = append(ceil[i], c)
			} else {
				rows[i].CeilingNote = note
			}
		}
	}
	for i, d := range ds {
		for _, g := range concurrencies {
			if len(samples[i][g]) > 0 {
				rows[i].PerSec[fmt.Sprintf("g=%d", g)] = round(median(samples[i][g]), 0)
			}
		}
		rows[i].Ceiling, rows[i].Unpipelined = median(ceil[i]), median(unpiped[i])
		e.logf("decisions: %s g=1 %.0f/s g=64 %.0f/s, redis-benchmark %.0f/s", d.name, rows[i].PerSec["g=1"], rows[i].PerSec["g=64"], rows[i].Ceiling)
	}
	return rows
}

// timedLoop runs f from g goroutines for about dur (after a short warm-up)
// and returns calls per second.
func timedLoop(ctx context.Context, g int, dur time.Duration, f func(ctx context.Context, i int) error) (float64, error) {
	for i := 0; i < g; i++ { // warm the pool and the script cache
		if err := f(ctx, i); err != nil {
			return 0, err
		}
	}
	var calls atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(dur)
	for w := 0; w < g; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; time.Now().Before(stop); i += g {
				if err := f(ctx, i); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				calls.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(calls.Load()) / time.Since(start).Seconds(), firstErr
}

// evalshaRate runs redis-benchmark against the run's server: n EVALSHAs
// with a captured call's script and arguments (tmpl), keys spread over
// nkeys, 64 connections with pipeline calls in flight on each.
func (e *env) evalshaRate(ctx context.Context, tmpl []any, nkeys, pipeline, n int) (float64, string) {
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		return 0, "redis-benchmark not found on PATH"
	}
	host, port, _ := strings.Cut(e.addr, ":")
	args := []string{"-h", host, "-p", port, "-c", "64", "-P", fmt.Sprint(pipeline), "-n", fmt.Sprint(n),
		"-r", fmt.Sprint(nkeys), "--csv"}
	for _, a := range withKey(tmpl, "rb-__rand_int__") {
		args = append(args, fmt.Sprint(a))
	}
	out, err := exec.CommandContext(ctx, bin, args...).Output()
	if err != nil {
		return 0, fmt.Sprintf("redis-benchmark: %v", err)
	}
	recs, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	if err != nil || len(recs) < 2 || len(recs[1]) < 2 {
		return 0, fmt.Sprintf("redis-benchmark: unreadable output %q", tail(string(out), 200))
	}
	rps, err := strconv.ParseFloat(recs[1][1], 64)
	if err != nil {
		return 0, fmt.Sprintf("redis-benchmark: rps %q", recs[1][1])
	}
	return round(rps, 0), ""
}

func decisionTable(rows []DecisionRow) string {
	t := table{head: []string{"limiter", "limit", "g=1 (/s)", "g=16 (/s)", "g=64 (/s)",
		"redis-benchmark c=64 (/s)", "redis-benchmark c=64 -P 16: ceiling (/s)", "g=64 / ceiling"},
		align: "llrrrrrr"}
	for _, r := range rows {
		if r.Error != "" {
			t.add(r.Limiter, r.Limit, "error: "+r.Error, "", "", "", "", "")
			continue
		}
		unp, ceil, ratio := "–", "–", "–"
		if r.Unpipelined > 0 {
			unp = num(r.Unpipelined, 0)
		}
		if r.Ceiling > 0 {
			ceil = num(r.Ceiling, 0)
			ratio = num(r.PerSec["g=64"]/r.Ceiling, 2)
		} else if r.CeilingNote != "" {
			ceil = r.CeilingNote
		}
		t.add(r.Limiter, r.Limit, num(r.PerSec["g=1"], 0), num(r.PerSec["g=16"], 0), num(r.PerSec["g=64"], 0), unp, ceil, ratio)
	}
	return t.String()
}
