package main_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/testsink"
)

// A kill -9 of one of 3 processes at 50/s with the default config: the
// dead process held at most the downstream's look-ahead (200 ms of the
// rate, plus one) and its calls in flight, and the survivors return its
// tasks to the front of the queue within 10 s (asynq alone: 60-120 s).
// Every task is delivered; duplicates are at most the calls in flight at
// the kill.
func TestKillNineStrandsFewAndRecoversFast(t *testing.T) {
	sink := testsink.New()
	defer sink.Close()
	prefix := redistest.Prefix(t)
	const n, rate = 1000, 50
	enqueue(t, prefix, n)
	cfg := defaultConfig(redistest.URL(t), prefix, sink.URL(), "50/s")
	procs := []*proc{startShaper(t, cfg), startShaper(t, cfg), startShaper(t, cfg)}
	victim := procs[0]
	base := "http://" + httpAddr(t, victim)
	waitFor(t, 30*time.Second, "200 deliveries", func() bool { return sink.Count() >= 200 })
	held, _ := scrape(t, base).value("shaper_shaping_held_tasks", "downstream=api")
	victim.cmd.Process.Signal(syscall.SIGKILL)
	killedAt := time.Now()
	<-victim.done
	victim.done <- nil
	rdb := redistest.Client(t)
	active, err := rdb.LRange(context.Background(), keys.New(prefix).Asynq("api").Active(), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "every task delivered", func() bool { return len(delivered(sink)) >= n })
	for _, p := range procs[1:] {
		p.stop(t)
	}
	last := map[string]time.Time{}
	for _, h := range sink.OK() {
		last[h.TaskID] = h.At
	}
	var slowest time.Duration
	for _, id := range active {
		slowest = max(slowest, last[id].Sub(killedAt))
	}
	seen := delivered(sink)
	dups := 0
	for i := range n {
		c := seen[fmt.Sprintf(`{"n":%d}`, i)]
		if c == 0 {
			t.Errorf("task %d never delivered", i)
		}
		dups += max(c-1, 0)
	}
	t.Logf("kill -9 at 50/s × 3: the victim held %.0f tasks; the %d tasks active at the kill were all delivered within %v of it; %d duplicates; run took %v (ideal %v)",
		held, len(active), slowest.Round(time.Millisecond), dups, testsink.Span(testsink.Times(sink.OK())).Round(time.Millisecond), time.Duration(n/rate)*time.Second)
	// the look-ahead: ceil(50/s × 200ms) + 1 = 11; calls in flight to a
	// local sink: at most 2
	if max := float64(11 + 2); held > max {
		t.Errorf("the killed process held %.0f tasks, want at most the look-ahead and its calls in flight (%.0f)", held, max)
	}
	if slowest > 10*time.Second {
		t.Errorf("the last task held at the kill was delivered %v after it, want within 10s", slowest)
	}
	if dups > 2 {
		t.Errorf("%d duplicates, want at most the calls in flight at the kill (≤ 2 at 50/s with a local sink)", dups)
	}
}
