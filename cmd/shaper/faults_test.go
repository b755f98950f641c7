package main_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/testsink"
	"github.com/shaper-io/shaper/internal/testutil"
	"github.com/shaper-io/shaper/queue"
)

func faultConfig(redisURL, prefix, sinkURL, rate string, workers int, maxWait string) string {
	return fmt.Sprintf(`
redis: {url: %q, prefix: %q, timeout: 300ms}
http: {listen: "127.0.0.1:0"}
shutdown_timeout: 5s
downstreams:
  - name: api
    rate: %s
    workers: %d
    max_wait: %s
    handler: {type: http, url: %q, timeout: 5s}
`, redisURL, prefix, rate, workers, maxWait, sinkURL)
}

// checkNoBurst holds the invariant on release instants (when shaper sends,
// which it controls): at most rate+1 in any second. Arrivals at the sink,
// which shares two cores with the shapers and this test, also carry the
// transport's jitter, so they get 10% of slack: a real burst after a crash
// or a restart would be a backlog's worth, far past it.
func checkNoBurst(t *testing.T, rate, byRelease, byArrival int) {
	t.Helper()
	t.Logf("max in a 1s window: by release time %d, by arrival %d (rate %d/s)", byRelease, byArrival, rate)
	if byRelease > rate+1 {
		t.Errorf("%d releases in a 1s window, want <= %d", byRelease, rate+1)
	}
	if byArrival > rate+1+rate/10 {
		t.Errorf("%d arrivals in a 1s window, want <= %d", byArrival, rate+1+rate/10)
	}
}

// waitDelivered waits up to d for n distinct tasks at sink; on timeout it
// fails saying how many came and where the rest wait in the queue.
func waitDelivered(t *testing.T, sink *testsink.Sink, rdb redis.UniversalClient, prefix string, n int, d time.Duration) {
	t.Helper()
	if !testutil.Eventually(d, func() bool { return len(delivered(sink)) >= n }) {
		bl, err := queue.NewInspector(rdb, prefix).Backlog("api")
		t.Fatalf("%d of %d tasks delivered after %v; the queue: %+v (err %v)", len(delivered(sink)), n, d, bl, err)
	}
}

// ownRedis starts a redis-server of the test's own (for tests that stop,
// restart or stall it) and a client of it, both gone when the test ends.
func ownRedis(t *testing.T, args ...string) (*redistest.Server, *redis.Client) {
	t.Helper()
	srv, err := redistest.Start(args...)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close(); srv.Stop(); srv.Cleanup() })
	return srv, rdb
}

func enqueueOn(t *testing.T, rdb redis.UniversalClient, prefix string, n int) {
	t.Helper()
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix})
	defer p.Close()
	for i := 0; i < n; i++ {
		if _, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}); err != nil {
			t.Fatal(err)
		}
	}
}

func delivered(sink *testsink.Sink) map[string]int { return sink.Delivered() }

// kill -9 one of three workers mid-run: every task is delivered, the
// survivors take over, no second carries more than rate+1, and duplicates
// are bounded by what the dead worker held. 1,500 tasks at 100/s: the
// kill comes 5 s in and the survivors release for 10 s more, longer than
// the dead process's tasks take to come back (RecoverAfter, 7 s by
// default), so they come back into a running backlog (3,000 tasks took
// 30 s for the same checks).
func TestWorkerKilledMidRun(t *testing.T) {
	sink := testsink.New()
	defer sink.Close()
	prefix := redistest.Prefix(t)
	const n, workers = 1500, 10
	enqueue(t, prefix, n)
	cfg := faultConfig(redistest.URL(t), prefix, sink.URL(), "100/s", workers, "500ms")
	procs := []*proc{startShaper(t, cfg), startShaper(t, cfg), startShaper(t, cfg)}
	waitFor(t, 30*time.Second, "a third of the tasks", func() bool { return sink.Count() >= n/3 })
	victim := procs[0]
	victim.cmd.Process.Signal(syscall.SIGKILL)
	killedAt := time.Now()
	<-victim.done
	victim.done <- nil
	victimID := fmt.Sprintf("/%d", victim.cmd.Process.Pid)
	// the survivors return the dead process's tasks some 7 s after the
	// kill (RecoverAfter); asynq's own recoverer, once their lease (30s)
	// has been expired for 30s more and it runs (every minute), up to two
	// minutes after it
	waitFor(t, 200*time.Second, "every task delivered", func() bool { return len(delivered(sink)) >= n })
	for _, p := range procs[1:] {
		p.stop(t)
	}
	seen := delivered(sink)
	dups := 0
	for i := 0; i < n; i++ {
		c := seen[fmt.Sprintf(`{"n":%d}`, i)]
		if c == 0 {
			t.Errorf("task %d never delivered", i)
		}
		dups += max(c-1, 0)
	}
	if dups > workers {
		t.Errorf("%d duplicate deliveries, want at most the dead worker's %d workers", dups, workers)
	}
	afterKill := map[string]int{}
	for _, h := range sink.OK() {
		if h.At.After(killedAt) {
			afterKill[h.Process]++
			if strings.HasSuffix(h.Process, victimID) {
				t.Errorf("a release from the killed process after kill -9")
			}
		}
	}
	if len(afterKill) != 2 {
		t.Errorf("after the kill, releases came from %d processes, want the 2 survivors: %v", len(afterKill), afterKill)
	}
	var released []time.Time
	for _, h := range sink.Hits() {
		released = append(released, h.Wake)
	}
	byRelease, byArrival := testsink.MaxInWindow(released, time.Second), testsink.MaxInWindow(testsink.Times(sink.Hits()), time.Second)
	checkNoBurst(t, 100, byRelease, byArrival)
	t.Logf("kill -9: %d tasks, %d duplicates, survivors %v", n, dups, afterKill)
}

// Redis (appendonly) restarts mid-run: the daemons keep running, report
// not-ready while it is away, resume within 5s, and lose nothing.
func TestRedisRestartMidRun(t *testing.T) {
	srv, rdb := ownRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	sink := testsink.New()
	defer sink.Close()
	prefix := redistest.Prefix(t)
	const n = 400
	enqueueOn(t, rdb, prefix, n)
	cfg := faultConfig("redis://"+srv.Addr, prefix, sink.URL(), "50/s", 10, "500ms")
	procs := []*proc{startShaper(t, cfg), startShaper(t, cfg)}
	addr := httpAddr(t, procs[0])
	waitFor(t, 20*time.Second, "100 deliveries", func() bool { return sink.Count() >= 100 })
	srv.Stop()
	down := time.Now()
	waitFor(t, 5*time.Second, "readyz to report not ready", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	waitFor(t, 5*time.Second, "2s of outage", func() bool { return time.Since(down) > 2*time.Second })
	if err := srv.StartAgain(); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	before := sink.Count()
	waitFor(t, 5*time.Second, "releases resuming within 5s", func() bool { return sink.Count() > before })
	t.Logf("resumed %v after Redis came back", time.Since(up).Round(time.Millisecond))
	// a dequeue whose reply the outage lost is found by the scan after
	// trouble: RecoverAfter (7s) + the 7s settle at most
	waitDelivered(t, sink, rdb, prefix, n, 60*time.Second)
	t.Logf("all %d delivered %v after Redis came back", n, time.Since(up).Round(time.Millisecond))
	for _, p := range procs {
		select {
		case err := <-p.done:
			t.Fatalf("a shaper process exited during the outage: %v", err)
		default:
		}
	}
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("readyz after recovery: %v %v, want 200", resp, err)
	}
	for _, p := range procs {
		p.stop(t)
	}
	// a done lost to the outage is retried until it lands (asynqClient),
	// so no task is recovered and delivered again
	for p, c := range delivered(sink) {
		if c > 1 {
			t.Errorf("task %s delivered %d times, want once", p, c)
		}
	}
	var released []time.Time
	for _, h := range sink.Hits() {
		released = append(released, h.Wake)
	}
	checkNoBurst(t, 50, testsink.MaxInWindow(released, time.Second), testsink.MaxInWindow(testsink.Times(sink.Hits()), time.Second))
}

// A Redis that stops answering (DEBUG SLEEP) makes takes and reservations
// time out: shaping fails closed, so nothing is released beyond the slots
// reserved before the stall.
func TestSlowRedisReleasesNothingWithoutReservation(t *testing.T) {
	srv, rdb := ownRedis(t, "--enable-debug-command", "yes")
	sink := testsink.New()
	defer sink.Close()
	prefix := redistest.Prefix(t)
	const n = 200
	enqueueOn(t, rdb, prefix, n)
	// Takes come every 100ms or so at 50/s, and reservations as tasks
	// come: a 2s stall hits them.
	p := startShaper(t, faultConfig("redis://"+srv.Addr, prefix, sink.URL(), "50/s", 20, "200ms"))
	waitFor(t, 20*time.Second, "50 deliveries", func() bool { return sink.Count() >= 50 })
	scriptErrors := func() float64 {
		resp, err := http.Get("http://" + httpAddr(t, p) + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		sum := 0.0
		for _, m := range regexp.MustCompile(`(?m)^shaper_redis_script_errors_total\{script="(?:shaping|take)"\} (\S+)$`).FindAllSubmatch(b, -1) {
			v, _ := strconv.ParseFloat(string(m[1]), 64)
			sum += v
		}
		return sum
	}
	if e := scriptErrors(); e != 0 {
		t.Fatalf("%v script errors before the stall", e)
	}
	stallStart := time.Now()
	// DEBUG SLEEP blocks the whole server for 2s.
	if err := rdb.Do(context.Background(), "DEBUG", "SLEEP", "2").Err(); err != nil {
		t.Fatal(err)
	}
	stallEnd := time.Now()
	// The stall must have hit takes or reservations, or this test proves
	// nothing.
	if e := scriptErrors(); e == 0 {
		t.Fatal("no take or reservation failed during the stall")
	}
	// (the full suite once timed out here after 40s; alone it passes in 7s)
	waitDelivered(t, sink, rdb, prefix, n, 40*time.Second)
	p.stop(t)
	// Slots reserved before the stall lie within max_wait (200ms) of it.
	inside := 0
	for _, h := range sink.Hits() {
		if h.At.After(stallStart.Add(300*time.Millisecond)) && h.At.Before(stallEnd.Add(-100*time.Millisecond)) {
			inside++
		}
	}
	if inside != 0 {
		t.Errorf("%d releases while Redis was stalled (beyond slots reserved before it), want 0", inside)
	}
	if s := p.stderr.String(); !strings.Contains(s, "cannot reserve a slot") && !strings.Contains(s, "take: take failed") {
		t.Errorf("no warning about failed takes or reservations in the log")
	}
}
