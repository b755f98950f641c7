package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/shaper-io/shaper/limiters"
)

// Run with: go test -run '^$' -bench . -benchtime 5s ./queue/
//
// Enqueue throughput: plain asynq Enqueue against Producer.Enqueue with
// admission (one token bucket per tenant; and the seeds' layered shape, a
// tenant bucket plus a global window), on the same Redis, from 1 and 16
// goroutines. Then rejected decisions, with and without the local
// pre-filter. Each reports tasks/s.

var benchPayload = []byte(`{"invoice":42,"amount":"19.99","currency":"EUR"}`)

// inParallel runs f b.N times over g goroutines and reports tasks/s.
func inParallel(b *testing.B, g int, f func(i int) error) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= b.N {
					return
				}
				if err := f(i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
}

func (bb *bundle) dropQueue(b *testing.B, ds string) {
	b.Helper()
	if err := bb.in.Asynq().DeleteQueue(bb.in.space.Queue(ds), true); err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
		b.Logf("delete queue: %v", err)
	}
}

func BenchmarkEnqueue(b *testing.B) {
	for _, g := range []int{1, 16} {
		b.Run(fmt.Sprintf("asynq/g=%d", g), func(b *testing.B) {
			bb := setup(b)
			c := asynq.NewClientFromRedisClient(bb.rdb)
			defer c.Close()
			q := bb.in.space.Queue("api")
			defer bb.dropQueue(b, "api")
			inParallel(b, g, func(int) error {
				_, err := c.Enqueue(asynq.NewTask(DefaultType, benchPayload), asynq.Queue(q))
				return err
			})
		})
		b.Run(fmt.Sprintf("admission-bucket/g=%d", g), func(b *testing.B) {
			bb := setup(b)
			lim := bb.limiter(b, "tenant", limiters.TokenBucket, limiters.PerSecond(1_000_000))
			p := bb.producer(b, ProducerConfig{Admission: map[string]Admission{"api": {Limiter: lim}}})
			defer bb.dropQueue(b, "api")
			inParallel(b, g, func(i int) error {
				_, err := p.Enqueue(context.Background(), Task{Downstream: "api", Key: fmt.Sprint("tenant-", i%100), Payload: benchPayload})
				return err
			})
		})
		b.Run(fmt.Sprintf("admission-layered/g=%d", g), func(b *testing.B) {
			bb := setup(b)
			tenant := bb.limiter(b, "tenant", limiters.TokenBucket, limiters.PerSecond(1_000_000))
			global := bb.limiter(b, "global", limiters.FixedWindow, limiters.PerSecond(1_000_000_000))
			layered, err := limiters.NewLayered(limiters.Layer{Limiter: tenant}, limiters.Layer{Limiter: global, Key: limiters.Global})
			if err != nil {
				b.Fatal(err)
			}
			p := bb.producer(b, ProducerConfig{Admission: map[string]Admission{"api": {Limiter: layered}}})
			defer bb.dropQueue(b, "api")
			inParallel(b, g, func(i int) error {
				_, err := p.Enqueue(context.Background(), Task{Downstream: "api", Key: fmt.Sprint("tenant-", i%100), Payload: benchPayload})
				return err
			})
		})
	}
}

// BenchmarkEnqueuePaired measures the same ratio in a way that survives a
// noisy machine: every goroutine alternates a plain asynq Enqueue and an
// admitted Producer.Enqueue (token bucket per tenant), timing each, so
// both kinds meet the same load. It reports each kind's throughput
// (goroutines / mean latency) and their ratio.
func BenchmarkEnqueuePaired(b *testing.B) {
	for _, g := range []int{1, 16} {
		b.Run(fmt.Sprintf("g=%d", g), func(b *testing.B) {
			bb := setup(b)
			c := asynq.NewClientFromRedisClient(bb.rdb)
			defer c.Close()
			lim := bb.limiter(b, "tenant", limiters.TokenBucket, limiters.PerSecond(1_000_000))
			p := bb.producer(b, ProducerConfig{Admission: map[string]Admission{"adm": {Limiter: lim}}})
			rawQ := bb.in.space.Queue("raw")
			defer bb.dropQueue(b, "raw")
			defer bb.dropQueue(b, "adm")
			var rawNS, admNS, rawN, admN atomic.Int64
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for range g {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := int(next.Add(1) - 1)
						if i >= b.N {
							return
						}
						start := time.Now()
						var err error
						if i%2 == 0 {
							_, err = c.Enqueue(asynq.NewTask(DefaultType, benchPayload), asynq.Queue(rawQ))
							rawNS.Add(int64(time.Since(start)))
							rawN.Add(1)
						} else {
							_, err = p.Enqueue(context.Background(), Task{Downstream: "adm", Key: fmt.Sprint("tenant-", i%100), Payload: benchPayload})
							admNS.Add(int64(time.Since(start)))
							admN.Add(1)
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			if rawN.Load() == 0 || admN.Load() == 0 {
				return
			}
			raw := float64(g) / (float64(rawNS.Load()) / float64(rawN.Load()) / 1e9)
			adm := float64(g) / (float64(admNS.Load()) / float64(admN.Load()) / 1e9)
			b.ReportMetric(raw, "asynq-tasks/s")
			b.ReportMetric(adm, "admitted-tasks/s")
			b.ReportMetric(adm/raw, "ratio")
		})
	}
}

// Rejected decisions: 100 tenants, each over its limit (1/h, already
// spent). Without the pre-filter every rejection is a Redis round trip;
// with it, repeats are answered in-process until their Retry-After.
func BenchmarkRejected(b *testing.B) {
	for _, prefilter := range []bool{false, true} {
		for _, g := range []int{1, 16} {
			b.Run(fmt.Sprintf("prefilter=%v/g=%d", prefilter, g), func(b *testing.B) {
				bb := setup(b)
				var lim limiters.Limiter = bb.limiter(b, "tenant", limiters.TokenBucket, limiters.PerHour(1))
				if prefilter {
					lim = limiters.NewPrefilter(lim, 0, nil)
				}
				p := bb.producer(b, ProducerConfig{Admission: map[string]Admission{"api": {Limiter: lim}}})
				ctx := context.Background()
				for i := range 100 {
					if _, err := p.Enqueue(ctx, Task{Downstream: "api", Key: fmt.Sprint("tenant-", i)}); err != nil {
						b.Fatal(err)
					}
				}
				defer bb.dropQueue(b, "api")
				inParallel(b, g, func(i int) error {
					_, err := p.Enqueue(ctx, Task{Downstream: "api", Key: fmt.Sprint("tenant-", i%100), Payload: benchPayload})
					var rej *RejectedError
					if !errors.As(err, &rej) {
						return fmt.Errorf("want a rejection, got %v", err)
					}
					return nil
				})
			})
		}
	}
}
