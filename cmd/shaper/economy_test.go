package main_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/testsink"
)

// defaultConfig is a downstream as a new user writes it: a rate, an HTTP
// handler, every other field (workers, max_wait) at its default.
func defaultConfig(redisURL, prefix, sinkURL, rate string) string {
	return fmt.Sprintf(`
redis: {url: %q, prefix: %q}
http: {listen: "127.0.0.1:0"}
shutdown_timeout: 5s
downstreams:
  - name: api
    rate: %s
    handler: {type: http, url: %q, timeout: 5s}
`, redisURL, prefix, rate, sinkURL)
}

// commandsDuring runs f and returns the Redis commands it caused.
func commandsDuring(t *testing.T, rdb redis.UniversalClient, f func()) redistest.CommandStats {
	t.Helper()
	before, err := redistest.ReadCommandStats(context.Background(), rdb)
	if err != nil {
		t.Fatal(err)
	}
	f()
	after, err := redistest.ReadCommandStats(context.Background(), rdb)
	if err != nil {
		t.Fatal(err)
	}
	d := after.Sub(before)
	d["info"] -= 1 // the first read
	return d
}

func top(s redistest.CommandStats, n int) string {
	type kv struct {
		k string
		v int64
	}
	var all []kv
	for k, v := range s {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v })
	var b strings.Builder
	for i := 0; i < len(all) && i < n; i++ {
		fmt.Fprintf(&b, "%s=%d ", all[i].k, all[i].v)
	}
	return b.String()
}

// rawAsynq drains n tasks from queue q with 3 asynq servers × 20 workers
// whose handler POSTs to url: the baseline the release path is held to.
func rawAsynq(t *testing.T, rdb *redis.Client, q, url string, n int, sink *testsink.Sink) {
	t.Helper()
	var srvs []*asynq.Server
	for range 3 {
		srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: 20, Queues: map[string]int{q: 1}, LogLevel: asynq.ErrorLevel})
		h := asynq.HandlerFunc(func(ctx context.Context, tk *asynq.Task) error {
			resp, err := http.Post(url, "application/json", bytes.NewReader(tk.Payload()))
			if err != nil {
				return err
			}
			return resp.Body.Close()
		})
		if err := srv.Start(h); err != nil {
			t.Fatal(err)
		}
		srvs = append(srvs, srv)
	}
	waitFor(t, 60*time.Second, fmt.Sprintf("%d raw asynq deliveries", n), func() bool { return sink.Count() >= n })
	for _, s := range srvs {
		s.Shutdown()
	}
}

// The release path's Redis work per released task, counted with INFO
// commandstats on a Redis of the test's own, for 3 shaper processes with
// the default config next to raw asynq (3 servers × 20 workers, no limit)
// draining the same tasks. At 200/s and 1000/s at most 1.1× raw asynq's;
// at 50/s, where a take and its reservation serve about 4 releases (the
// look-ahead of 200ms split over 3 processes), at most 1.2×. A count, not
// a timing: each rate runs on a Redis of its own, beside the others and
// the package's other parallel tests.
func TestCommandsPerReleaseThreeProcesses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rate  string
		per   int
		tasks int
		bound float64 // × raw asynq's commands per task
	}{{"50/s", 50, 400, 1.2}, {"200/s", 200, 1200, 1.1}, {"1000/s", 1000, 3000, 1.1}} {
		t.Run(strings.ReplaceAll(tc.rate, "/", "per"), func(t *testing.T) {
			t.Parallel()
			_, rdb := ownRedis(t)
			url := "redis://" + rdb.Options().Addr + "/0"
			rawSink := testsink.New()
			defer rawSink.Close()
			rawPrefix := "raw" + fmt.Sprint(tc.per)
			enqueueOn(t, rdb, rawPrefix, tc.tasks)
			raw := commandsDuring(t, rdb, func() { rawAsynq(t, rdb, rawPrefix+":api", rawSink.URL(), tc.tasks, rawSink) })

			sink := testsink.New()
			defer sink.Close()
			prefix := "econ" + fmt.Sprint(tc.per)
			enqueueOn(t, rdb, prefix, tc.tasks)
			cfg := defaultConfig(url, prefix, sink.URL(), tc.rate)
			var procs []*proc
			shaped := commandsDuring(t, rdb, func() {
				procs = []*proc{startShaper(t, cfg), startShaper(t, cfg), startShaper(t, cfg)}
				waitFor(t, 90*time.Second, fmt.Sprintf("%d deliveries", tc.tasks), func() bool { return sink.Count() >= tc.tasks })
			})
			for _, p := range procs {
				p.stop(t)
			}
			n := float64(tc.tasks)
			rawPer, shapedPer := float64(raw.Total())/n, float64(shaped.Total())/n
			t.Logf("%s × 3 processes, default workers: %.1f commands per released task (evalsha %.2f); raw asynq %.1f (evalsha %.2f); ratio %.2f",
				tc.rate, shapedPer, float64(shaped["evalsha"])/n, rawPer, float64(raw["evalsha"])/n, shapedPer/rawPer)
			t.Logf("shaper top commands: %s", top(shaped, 12))
			t.Logf("raw asynq top commands: %s", top(raw, 12))
			if shapedPer > tc.bound*rawPer {
				t.Errorf("%.1f Redis commands per released task, want at most %.2f× raw asynq's %.1f", shapedPer, tc.bound, rawPer)
			}
			if got := len(sink.OK()); got != tc.tasks {
				t.Errorf("%d deliveries, want %d", got, tc.tasks)
			}
		})
	}
}

// manyConfig is n idle downstreams as a new user writes them.
func manyConfig(redisURL, prefix string, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "redis: {url: %q, prefix: %q}\nhttp: {listen: \"127.0.0.1:0\"}\nshutdown_timeout: 5s\ndownstreams:\n", redisURL, prefix)
	for i := range n {
		fmt.Fprintf(&b, "  - {name: ds%03d, rate: 10/s, handler: {type: log}}\n", i)
	}
	return b.String()
}

// Idle: 100 downstreams × 3 processes with no task cost at most 2 Redis
// commands per second per downstream per process and at most 10 open
// connections per process (one take loop per process: an asynq.Server
// per downstream cost 11 commands/s and more than one connection per
// downstream per process). Counts on a Redis of its own, beside the
// package's other parallel tests.
func TestIdleCommandsManyDownstreams(t *testing.T) {
	t.Parallel()
	_, rdb := ownRedis(t)
	url := "redis://" + rdb.Options().Addr + "/0"
	const n, procs = 100, 3
	cfg := manyConfig(url, "idle", n)
	var ps []*proc
	for range procs {
		p := startShaper(t, cfg)
		ps = append(ps, p)
	}
	for _, p := range ps {
		httpAddr(t, p) // up and serving
	}
	// Let start-up work (script loads, first reads) pass, then count.
	time.Sleep(3 * time.Second) // not a wait for a condition: the warm-up before a fixed measuring window
	const window = 10 * time.Second
	d := commandsDuring(t, rdb, func() { time.Sleep(window) }) // the measuring window itself
	per := float64(d.Total()) / window.Seconds() / n / procs
	t.Logf("idle: %d downstreams × %d processes: %.0f commands/s in all, %.2f per downstream per process; top: %s",
		n, procs, float64(d.Total())/window.Seconds(), per, top(d, 12))
	if per > 2 {
		t.Errorf("idle cost %.2f commands/s per downstream per process, want at most 2", per)
	}
	conns := connectedClients(t, rdb) - 1 // this test's own
	t.Logf("idle: %d connections to Redis from %d processes", conns, procs)
	if conns > 10*procs {
		t.Errorf("%d connections from %d idle processes, want at most 10 each", conns, procs)
	}
	for _, p := range ps {
		p.stop(t)
	}
}

// connectedClients is the server's connected_clients.
func connectedClients(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "clients").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_clients:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("INFO clients has no connected_clients")
	return 0
}
