package main_test

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/testsink"
	"github.com/shaper-io/shaper/queue"
)

var breakerOpen = regexp.MustCompile(`(?m)^shaper_shaping_breaker_state\{downstream="api"\} [12]$`)

// breakerSeen reports whether the process at addr shows its breaker open
// or half-open on /metrics.
func breakerSeen(addr string) bool {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return breakerOpen.Match(b)
}

// The test with real processes: three shaper daemons, an API that
// answers 500 for 10s and then recovers. Each process shows the breaker
// open within one window of the first 500; while the API is down it sees
// at most the probe pace; after it recovers every task is delivered once,
// none archived, and asynq counted no failed attempt.
func TestBreakerThreeProcesses(t *testing.T) {
	const (
		n    = 200
		down = 10 * time.Second
	)
	sink := testsink.New()
	defer sink.Close()
	sink.DownFor(down)
	prefix := redistest.Prefix(t)
	p := queue.NewProducer(redistest.Client(t), queue.ProducerConfig{Prefix: prefix})
	defer p.Close()
	retries := 1
	for i := range n {
		if _, err := p.Enqueue(t.Context(), queue.Task{Downstream: "api", Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)), MaxRetry: &retries}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := daemonYAML(t, prefix, fmt.Sprintf(`  - name: api
    rate: 50/s
    handler: {type: http, url: %q, timeout: 2s}
    breaker: {error_ratio: 0.5, window: 2s, min_calls: 10, cooldown: 1s, max_cooldown: 4s, probe_rate: 2/s, probes: 2}
`, sink.URL()))
	procs := []*proc{startShaper(t, cfg), startShaper(t, cfg), startShaper(t, cfg)}
	addrs := make([]string, len(procs))
	for i, pr := range procs {
		addrs[i] = httpAddr(t, pr)
	}
	opened := make([]time.Time, len(procs))
	waitFor(t, 20*time.Second, "the breaker open in every process", func() bool {
		all := true
		for i, a := range addrs {
			if opened[i].IsZero() && breakerSeen(a) {
				opened[i] = time.Now()
			}
			all = all && !opened[i].IsZero()
		}
		return all
	})
	waitFor(t, 60*time.Second, fmt.Sprintf("%d tasks delivered", n), func() bool { return sink.Count() >= n })
	first, upAt := sink.Down()
	calls := testsink.Times(sink.Hits())
	ok := sink.Delivered()
	last := opened[0]
	for i, at := range opened {
		t.Logf("process %d showed the breaker open %s after the first 500", i, at.Sub(first).Round(time.Millisecond))
		if at.Sub(first) > 2*time.Second {
			t.Errorf("process %d showed the breaker open %s after the first 500, want within the window (2s)", i, at.Sub(first))
		}
		if at.After(last) {
			last = at
		}
	}
	while, allowed := testsink.Between(calls, last, upAt), int(2*upAt.Sub(last).Seconds())+1
	t.Logf("the API saw %d calls before every process showed it open, %d in the %s after (2/s allows %d)",
		testsink.Between(calls, first, last), while, upAt.Sub(last).Round(time.Millisecond), allowed)
	if while > allowed {
		t.Errorf("%d calls while down after the breaker opened everywhere, want at most %d (probes at 2/s)", while, allowed)
	}
	for i := range n {
		if c := ok[fmt.Sprintf(`{"n":%d}`, i)]; c != 1 {
			t.Errorf("task %d answered 2xx %d times, want 1", i, c)
		}
	}
	in := queue.NewInspector(redistest.Client(t), prefix)
	var b queue.Backlog
	waitFor(t, 10*time.Second, "an empty queue", func() bool {
		b, _ = in.Backlog("api")
		return b.Pending+b.Active+b.Retry+b.Scheduled == 0
	})
	if b.Archived != 0 || b.Failed != 0 {
		t.Errorf("backlog %+v: want nothing archived and no failed attempt (the outage consumed none)", b)
	}
	for _, pr := range procs {
		pr.stop(t)
	}
}
