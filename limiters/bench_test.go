package limiters_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
)

// benchKeys is the number of keys the benchmarks spread decisions over, so
// no single hot key dominates.
const benchKeys = 1000

// benchRate is high enough that (nearly) every decision is allowed: at
// ~100k decisions/s over 1000 keys, each key sees ~100/s.
const benchRate = 100_000

// BenchmarkAdmission measures one admission decision (one script call over
// loopback TCP) for each algorithm, and redis_rate's GCRA on the same
// server in the same run, at 1 and 64 concurrent goroutines. With 64
// goroutines ns/op is wall time per decision, i.e. 1/throughput.
//
//	go test -run XXX -bench Admission ./limiters
func BenchmarkAdmission(b *testing.B) {
	if redistest.Cluster() {
		// a plain client on one node would get MOVED; the cluster's
		// numbers are BenchmarkClusterDecisions in cmd/shaper
		b.Skip("single-server benchmark; REDIS_CLUSTER_ADDRS is set")
	}
	// One pool big enough for 64 goroutines, shared by every contender.
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr(b), PoolSize: 64})
	b.Cleanup(func() { rdb.Close() })
	prefix := redistest.Prefix(b)
	ctx := context.Background()
	// Open all 64 connections now, not during the first benchmark.
	var warm sync.WaitGroup
	for i := 0; i < 64; i++ {
		warm.Add(1)
		go func() { defer warm.Done(); rdb.Ping(ctx) }()
	}
	warm.Wait()
	keyNames := make([]string, benchKeys)
	for i := range keyNames {
		keyNames[i] = fmt.Sprint("user-", i)
	}

	type decide func(ctx context.Context, key string) (bool, error)
	var contenders []struct {
		name string
		f    decide
	}
	for _, alg := range limiters.Algorithms() {
		l := limiters.PerSecond(benchRate)
		lim, err := limiters.New(rdb, limiters.Config{Name: "bench", Algorithm: alg, Limit: l, Prefix: prefix})
		if err != nil {
			b.Fatal(err)
		}
		contenders = append(contenders, struct {
			name string
			f    decide
		}{string(alg), func(ctx context.Context, key string) (bool, error) {
			res, err := lim.Allow(ctx, key, 1)
			return res.Allowed, err
		}})
	}
	rr := redis_rate.NewLimiter(rdb)
	rrLimit := redis_rate.PerSecond(benchRate)
	contenders = append(contenders, struct {
		name string
		f    decide
	}{"redis_rate_gcra", func(ctx context.Context, key string) (bool, error) {
		res, err := rr.Allow(ctx, prefix+":"+key, rrLimit)
		if err != nil {
			return false, err
		}
		return res.Allowed > 0, nil
	}})

	for _, c := range contenders {
		for _, g := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/g=%d", c.name, g), func(b *testing.B) {
				// warm up: load the script, fill the pool
				for i := 0; i < 64; i++ {
					if _, err := c.f(ctx, keyNames[i]); err != nil {
						b.Fatal(err)
					}
				}
				var next, allowed atomic.Int64
				var firstErr error
				var errOnce sync.Once
				var wg sync.WaitGroup
				b.ResetTimer()
				start := time.Now()
				for w := 0; w < g; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							n := next.Add(1)
							if n > int64(b.N) {
								return
							}
							ok, err := c.f(ctx, keyNames[n%benchKeys])
							if err != nil {
								errOnce.Do(func() { firstErr = err })
								return
							}
							if ok {
								allowed.Add(1)
							}
						}
					}()
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				if firstErr != nil {
					b.Fatal(firstErr)
				}
				b.ReportMetric(float64(allowed.Load())/float64(b.N), "allowed/op")
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
			})
		}
	}
}
