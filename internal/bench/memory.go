package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"

	"github.com/shaper-io/shaper/limiters"
)

// keyFamily is one kind of per-key state: the script call that creates a
// key's state (captured once, then replayed for every key with pipelines),
// and the decision whose latency is measured on those keys.
type keyFamily struct {
	name   string
	limit  string
	fill   decider // its captured call is replayed per key
	decide decider // timed on populated keys
	// twoWindows: fill each key twice, one window apart (the sliding
	// counter then holds its steady state: windows N-1 and N).
	twoWindows bool
	// subWindows: fill each key once in each of its last n sub-windows of
	// an hour, so its HASH holds n fields.
	subWindows int
	entries    int64 // sliding-log entries or sub-window fields per key (for the budget)
	base       bool  // one of the scenario 5 rows
}

// windowed limits are per hour so that no key expires during a run.
func keyFamilies(prefix string) []keyFamily {
	l := limiters.PerHour(10)
	var fs []keyFamily
	for _, alg := range limiters.Algorithms() {
		d := limiterDecider(alg, prefix, l, 1, "")
		fs = append(fs, keyFamily{name: string(alg), limit: l.String(), fill: d, decide: d,
			twoWindows: alg == limiters.SlidingCounter, entries: 1, base: true})
	}
	rr := redisRateDecider(prefix, redis_rate.PerHour(10))
	fs = append(fs, keyFamily{name: rr.name, limit: rr.limit, fill: rr, decide: rr, entries: 1, base: true})
	for _, n := range []int{10, 60} {
		// a limit above n, so that every fill is admitted; the n fields
		// per key count against the entry budget (filling is the slow part)
		lim := limiters.Limit{Rate: 100, Period: time.Hour}
		name := fmt.Sprintf("sliding_counter, %d sub-windows filled", n)
		d := subWindowDecider(prefix, lim, n, name)
		fs = append(fs, keyFamily{name: name, limit: lim.String(), fill: d, decide: d, subWindows: n, entries: int64(n), base: true})
	}
	for _, n := range []int64{10, 100, 1000} {
		lim := limiters.Limit{Rate: n, Period: time.Hour}
		name := fmt.Sprintf("sliding_log, full at %d", n)
		fs = append(fs, keyFamily{name: name, limit: lim.String(),
			fill:    limiterDecider(limiters.SlidingLog, prefix, lim, n, name),
			decide:  limiterDecider(limiters.SlidingLog, prefix, lim, 1, name),
			entries: n})
	}
	return fs
}

// GrowthRow is scenarios 5 and 6: one key family at one number of keys.
type GrowthRow struct {
	Family string `json:"family"`
	Limit  string `json:"limit"`
	Keys   int    `json:"keys"`
	// UsedPerKey is the growth of INFO used_memory since the empty
	// database, divided by Keys (includes Redis's per-key dictionary and
	// expiry overhead).
	UsedPerKey float64 `json:"used_memory_bytes_per_key"`
	// MemoryUsage is the mean MEMORY USAGE (SAMPLES 0) of up to 1,000
	// sampled Redis keys times RedisKeysPerKey.
	MemoryUsage     float64 `json:"memory_usage_bytes_per_key,omitempty"`
	RedisKeysPerKey float64 `json:"redis_keys_per_key"`
	// Decision latency at one goroutine on random populated keys (µs);
	// zero when not measured (scenario 5 alone).
	P50us     float64 `json:"decision_p50_us,omitempty"`
	P99us     float64 `json:"decision_p99_us,omitempty"`
	Decisions int     `json:"decisions_timed,omitempty"`
	Skipped   string  `json:"skipped,omitempty"`
	Error     string  `json:"error,omitempty"`
}

// keyScaling populates each family's keys level by level on an emptied
// Redis and measures memory (and, with latency, decision latency) at each
// level. Families with many sliding-log entries per key stop at the level
// whose entry count would pass EntryBudget.
func (e *env) keyScaling(ctx context.Context, levels []int, latency, onlyBase bool) []GrowthRow {
	prefix := e.prefix("keys")
	var rows []GrowthRow
	for _, f := range keyFamilies(prefix) {
		if onlyBase && !f.base {
			continue
		}
		rows = append(rows, e.scaleFamily(ctx, f, levels, latency)...)
	}
	return rows
}

// scaleFamily measures one family at each of levels, filling keys level by
// level; it stops at the first level it cannot fill or measure.
func (e *env) scaleFamily(ctx context.Context, f keyFamily, levels []int, latency bool) []GrowthRow {
	fail := func(err error) []GrowthRow {
		return []GrowthRow{{Family: f.name, Limit: f.limit, Error: err.Error()}}
	}
	calls, err := e.fillCalls(ctx, f)
	if err != nil {
		return fail(err)
	}
	if err := e.flush(ctx); err != nil { // drop the probe's state
		return fail(err)
	}
	mem0, err := e.infoInt(ctx, "memory", "used_memory")
	if err != nil {
		return fail(err)
	}
	decide := f.decide.mk(e.rdb)
	var rows []GrowthRow
	have := 0
	for _, n := range levels {
		row := GrowthRow{Family: f.name, Limit: f.limit, Keys: n}
		if row.Skipped = e.skipLevel(f, n); row.Skipped != "" {
			rows = append(rows, row)
			continue
		}
		start := time.Now()
		if err := e.populate(ctx, calls, have, n); err != nil {
			row.Error = err.Error()
			rows = append(rows, row)
			break
		}
		have = n
		if err := e.measureLevel(ctx, &row, mem0, decide, latency); err != nil {
			row.Error = err.Error()
			rows = append(rows, row)
			break
		}
		e.logf("keys: %s at %s keys: %.0f B/key (used_memory), %.0f B/key (MEMORY USAGE), p50 %.0fµs (filled in %.1fs)",
			f.name, inum(int64(n)), row.UsedPerKey, row.MemoryUsage, row.P50us, time.Since(start).Seconds())
		rows = append(rows, row)
	}
	return rows
}

// fillCalls captures the calls that fill one key of the family on an
// emptied Redis: its probe decision, preceded by the calls that fill the
// previous window or the earlier sub-windows.
func (e *env) fillCalls(ctx context.Context, f keyFamily) ([][]any, error) {
	if err := e.flush(ctx); err != nil {
		return nil, err
	}
	tmpl, err := e.capture(ctx, f.fill)
	if err != nil {
		return nil, err
	}
	var calls [][]any
	if f.twoWindows {
		// ARGV[5] (argument 8) is "now": fill the previous window first.
		t, err := e.rdb.Time(ctx).Result()
		if err != nil {
			return nil, err
		}
		prev := slices.Clone(tmpl)
		prev[8] = t.Add(-time.Hour).UnixMicro()
		calls = append(calls, prev)
	}
	if f.subWindows > 0 {
		// one call in each of the n sub-windows up to now (ARGV[5], as above)
		t, err := e.rdb.Time(ctx).Result()
		if err != nil {
			return nil, err
		}
		sub := time.Hour / time.Duration(f.subWindows)
		for j := f.subWindows - 1; j > 0; j-- {
			c := slices.Clone(tmpl)
			c[8] = t.Add(-time.Duration(j) * sub).UnixMicro()
			calls = append(calls, c)
		}
	}
	return append(calls, tmpl), nil
}

// skipLevel says why n keys of the family are not run, or "".
func (e *env) skipLevel(f keyFamily, n int) string {
	if n > 100_000 && !slices.Contains(e.opts.BigFamilies, f.name) {
		return "over 100k keys only " + strings.Join(e.opts.BigFamilies, ", ") + " runs (time)"
	}
	if int64(n)*f.entries > e.opts.EntryBudget {
		return fmt.Sprintf("%s entries > budget %s", inum(int64(n)*f.entries), inum(e.opts.EntryBudget))
	}
	return ""
}

// measureLevel fills row's memory figures for the keys populated now (and,
// with latency, its decision latency: an error there is the row's, not
// the run's). Only a failure to read used_memory is returned.
func (e *env) measureLevel(ctx context.Context, row *GrowthRow, mem0 int64, decide decideFunc, latency bool) error {
	mem, err := e.infoInt(ctx, "memory", "used_memory")
	if err != nil {
		return err
	}
	n := row.Keys
	dbsize, _ := e.rdb.DBSize(ctx).Result()
	row.UsedPerKey = round(float64(mem-mem0)/float64(n), 1)
	row.RedisKeysPerKey = round(float64(dbsize)/float64(n), 2)
	if mu, err := e.memoryUsage(ctx, 1000); err == nil {
		row.MemoryUsage = round(mu*row.RedisKeysPerKey, 1)
	}
	if latency {
		row.P50us, row.P99us, row.Decisions, err = timeDecisions(ctx, decide, n, e.opts.LatencySamples)
		if err != nil {
			row.Error = err.Error()
		}
	}
	return nil
}

// populate replays calls for keys k<from> .. k<to-1>, pipelined.
func (e *env) populate(ctx context.Context, calls [][]any, from, to int) error {
	const batch, workers = 1000, 2
	var mu sync.Mutex
	var firstErr error
	next := from
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				lo := next
				next = min(next+batch, to)
				hi := next
				stop := firstErr != nil
				mu.Unlock()
				if lo >= to || stop {
					return
				}
				pipe := e.rdb.Pipeline()
				for _, c := range calls {
					for i := lo; i < hi; i++ {
						pipe.Do(ctx, withKey(c, fmt.Sprint("k", i))...)
					}
				}
				if _, err := pipe.Exec(ctx); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// memoryUsage is the mean MEMORY USAGE (SAMPLES 0) of up to n keys found
// by SCAN.
func (e *env) memoryUsage(ctx context.Context, n int) (float64, error) {
	var keys []string
	var cursor uint64
	for len(keys) < n {
		ks, c, err := e.rdb.Scan(ctx, cursor, "", 1000).Result()
		if err != nil {
			return 0, err
		}
		keys = append(keys, ks...)
		if cursor = c; cursor == 0 {
			break
		}
	}
	keys = keys[:min(len(keys), n)]
	if len(keys) == 0 {
		return 0, fmt.Errorf("bench: no keys to sample")
	}
	pipe := e.rdb.Pipeline()
	cmds := make([]interface{ Val() int64 }, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.MemoryUsage(ctx, k, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	var sum int64
	for _, c := range cmds {
		sum += c.Val()
	}
	return float64(sum) / float64(len(keys)), nil
}

// timeDecisions makes up to samples decisions at one goroutine on random
// keys among the first n and returns p50 and p99 latency in µs.
func timeDecisions(ctx context.Context, decide decideFunc, n, samples int) (p50, p99 float64, count int, err error) {
	lat := make([]float64, 0, samples)
	r := rand.New(rand.NewPCG(uint64(n), 7))
	for i := 0; i < samples; i++ {
		k := fmt.Sprint("k", r.IntN(n))
		t := time.Now()
		if err := decide(ctx, k); err != nil {
			return 0, 0, i, err
		}
		lat = append(lat, us(time.Since(t)))
	}
	return round(percentile(lat, 0.5), 0), round(percentile(lat, 0.99), 0), len(lat), nil
}

func memoryTable(rows []GrowthRow, keys int) string {
	t := table{head: []string{"algorithm", "limit", "keys", "MEMORY USAGE (B/key)", "used_memory growth (B/key)", "Redis keys per key"},
		align: "llrrrr"}
	for _, r := range rows {
		if r.Keys != keys && r.Error == "" {
			continue
		}
		if r.Error != "" {
			t.add(r.Family, r.Limit, inum(int64(r.Keys)), "error: "+r.Error, "", "")
			continue
		}
		if r.Skipped != "" {
			t.add(r.Family, r.Limit, inum(int64(r.Keys)), "skipped: "+r.Skipped, "", "")
			continue
		}
		t.add(r.Family, r.Limit, inum(int64(r.Keys)), num(r.MemoryUsage, 0), num(r.UsedPerKey, 0), num(r.RedisKeysPerKey, 2))
	}
	return t.String()
}

func growthTable(rows []GrowthRow) string {
	t := table{head: []string{"family", "keys", "decision p50 (µs)", "decision p99 (µs)", "used_memory growth (B/key)", "MEMORY USAGE (B/key)"},
		align: "lrrrrr"}
	for _, r := range rows {
		switch {
		case r.Error != "":
			t.add(r.Family, inum(int64(r.Keys)), "error: "+r.Error, "", "", "")
		case r.Skipped != "":
			t.add(r.Family, inum(int64(r.Keys)), "skipped: "+r.Skipped, "", "", "")
		default:
			t.add(r.Family, inum(int64(r.Keys)), num(r.P50us, 0), num(r.P99us, 0), num(r.UsedPerKey, 0), num(r.MemoryUsage, 0))
		}
	}
	return t.String()
}
