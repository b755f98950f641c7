package take

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/redistest"
)

// ownRedis starts a redis-server of the caller's own, so that INFO counts
// only its commands and clients.
func ownRedis(tb testing.TB) *redis.Client { return redistest.Own(tb) }

func connectedClients(tb testing.TB, rdb *redis.Client) int {
	info := rdb.Info(context.Background(), "clients").Val()
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_clients:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	tb.Fatal("INFO clients has no connected_clients")
	return 0
}

// TestTakeIdleCost: one engine serving 100 or 1,000 downstreams with
// empty queues costs a small term per downstream and a handful of
// connections (today's asynq server per downstream: 11 commands/s per
// downstream per process, more than one connection each).
// The two sizes run side by side: each counts on a Redis of its own, and
// its bounds are ceilings that a busy CPU can only move away from (an
// engine held up polls less, not more), so together they take one 13 s
// window rather than two.
func TestTakeIdleCost(t *testing.T) {
	if testing.Short() {
		t.Skip("a 13s measurement per size")
	}
	for _, n := range []int{100, 1000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			t.Parallel()
			idleCost(t, n)
		})
	}
}

func idleCost(t *testing.T, n int) {
	rdb := ownRedis(t)
	e, err := New(Config{Redis: rdb, Keys: keys.New("idle"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := e.Add(Downstream{Name: fmt.Sprintf("d%04d", i), Rate: 10, InFlight: 4,
			Handler: func(context.Context, *Task) error { return nil }}); err != nil {
			t.Fatal(err)
		}
	}
	start(t, e)
	ctx := context.Background()
	settle := time.NewTimer(3 * time.Second) // the idle checks back off to IdlePoll within about 2s
	<-settle.C
	before, err := redistest.ReadCommandStats(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	const window = 10 * time.Second // two maintenance rounds (Maintain: 5s)
	w := time.NewTimer(window)
	<-w.C
	after, err := redistest.ReadCommandStats(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	d := after.Sub(before)
	d["info"]-- // the read of before
	perDS := float64(d.Total()) / window.Seconds() / float64(n)
	conns := connectedClients(t, rdb) - 1 // the test's own
	t.Logf("idle, %d downstreams, 1 engine: %.0f commands/s (%.2f per downstream), %d connections; by command %v",
		n, float64(d.Total())/window.Seconds(), perDS, conns, d)
	if perDS > 2.5 { // 2.0 measured; a third maintenance round may fall in the window
		t.Errorf("idle cost %.2f commands/s per downstream, want at most about 2", perDS)
	}
	if conns > 10 {
		t.Errorf("idle engine holds %d connections, want at most 10", conns)
	}
}

// BenchmarkTakeBacklog counts Redis commands per release while one engine
// drains a backlog of b.N tasks, beside raw asynq (an asynq.Server with
// the same concurrency, no rate limit) on the same backlog.
func BenchmarkTakeBacklog(b *testing.B) {
	for _, c := range []struct {
		name    string
		rate    float64
		engines int
	}{{"unlimited", 0, 1}, {"2000_per_s", 2000, 1}, {"3_engines_200_per_s", 200, 3}, {"3_engines_1000_per_s", 1000, 3}} {
		b.Run("take/"+c.name, func(b *testing.B) {
			benchBacklog(b, func(rdb *redis.Client, sp keys.Space, done func()) (stop func()) {
				var stops []func()
				var es []*Engine
				for range c.engines {
					// each engine its own client, as each process has
					cl := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
					e, err := New(Config{Redis: cl, Keys: sp, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
					if err != nil {
						b.Fatal(err)
					}
					if err := e.Add(Downstream{Name: "d", Rate: c.rate, InFlight: 50, Handler: func(context.Context, *Task) error {
						done()
						return nil
					}}); err != nil {
						b.Fatal(err)
					}
					ctx, cancel := context.WithCancel(context.Background())
					ran := make(chan struct{})
					go func() { e.Run(ctx); close(ran) }()
					es = append(es, e)
					stops = append(stops, func() { cancel(); <-ran; cl.Close() })
				}
				return func() {
					var takes int64
					for i, stop := range stops {
						stop()
						takes += es[i].Stats().Takes
					}
					b.ReportMetric(float64(takes)/float64(b.N), "takes/release")
				}
			})
		})
	}
	b.Run("raw_asynq/unlimited", func(b *testing.B) {
		benchBacklog(b, func(rdb *redis.Client, sp keys.Space, done func()) (stop func()) {
			srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: 50, Queues: map[string]int{sp.Queue("d"): 1},
				LogLevel: asynq.FatalLevel})
			if err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
				done()
				return nil
			})); err != nil {
				b.Fatal(err)
			}
			return srv.Shutdown
		})
	})
}

// benchBacklog enqueues b.N tasks, counts the commands while run's worker
// delivers them all, and reports commands per release.
func benchBacklog(b *testing.B, run func(rdb *redis.Client, sp keys.Space, done func()) (stop func())) {
	rdb := ownRedis(b)
	sp := keys.New("bench")
	cl := asynq.NewClientFromRedisClient(rdb)
	for i := range b.N {
		if _, err := cl.Enqueue(asynq.NewTask("job", []byte(strconv.Itoa(i))), asynq.Queue(sp.Queue("d"))); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	before, err := redistest.ReadCommandStats(ctx, rdb)
	if err != nil {
		b.Fatal(err)
	}
	all := make(chan struct{})
	var left = int64(b.N)
	var mu = make(chan struct{}, 1)
	done := func() {
		mu <- struct{}{}
		left--
		if left == 0 {
			close(all)
		}
		<-mu
	}
	b.ResetTimer()
	stop := run(rdb, sp, done)
	<-all
	b.StopTimer()
	processed := sp.Asynq("d").ProcessedTotal()
	waitUntil := time.Now().Add(10 * time.Second)
	for rdb.Get(ctx, processed).Val() != strconv.Itoa(b.N) && time.Now().Before(waitUntil) {
		time.Sleep(5 * time.Millisecond) // the last finishing writes, bounded by waitUntil
	}
	after, err := redistest.ReadCommandStats(ctx, rdb)
	stop()
	if err != nil {
		b.Fatal(err)
	}
	d := after.Sub(before)
	b.ReportMetric(float64(d.Total()-2)/float64(b.N), "cmds/release")
	b.ReportMetric(float64(d["evalsha"]+d["eval"])/float64(b.N), "scripts/release")
}
