package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/queue"
)

// slowSink answers after d and remembers the most calls it had open at once.
type slowSink struct {
	mu       sync.Mutex
	open     int
	maxOpen  int
	payloads map[string]int
	srv      *httptest.Server
}

func newSlowSink(d time.Duration) *slowSink {
	s := &slowSink{payloads: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.open++
		s.maxOpen = max(s.maxOpen, s.open)
		s.mu.Unlock()
		time.Sleep(d) // the downstream's call time, which the cap is about
		s.mu.Lock()
		s.open--
		s.payloads[string(b)]++
		s.mu.Unlock()
	}))
	return s
}

func (s *slowSink) delivered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.payloads)
}

// Three shaper processes, `concurrency: 5`, a downstream that takes 200ms
// per call: never more than 5 calls open at once across the processes.
// A kill -9 of one process that holds leases: its places are free again
// within the lease time (2s here) and nothing is lost. Parallel: it
// counts calls open at once, not releases per second or latencies, and
// parallel tests only start once the package's timing tests are done.
func TestConcurrencyCapThreeProcessesAndKill(t *testing.T) {
	t.Parallel()
	sink := newSlowSink(200 * time.Millisecond)
	defer sink.srv.Close()
	prefix := redistest.Prefix(t)
	const n = 150
	enqueue(t, prefix, n)
	cfg := daemonYAML(t, prefix, fmt.Sprintf(`  - name: api
    rate: 100/s
    concurrency: 5
    lease: 2s
    handler: {type: http, url: %q, timeout: 5s}
`, sink.srv.URL))
	procs := []*proc{startShaper(t, cfg), startShaper(t, cfg), startShaper(t, cfg)}
	rdb := redistest.Client(t)
	leases := keys.New(prefix).Leases("api")
	waitFor(t, 30*time.Second, "the victim holding a lease", func() bool { return sink.delivered() >= 20 })
	victim := procs[0]
	victim.cmd.Process.Signal(syscall.SIGKILL)
	killed := time.Now()
	<-victim.done
	victim.done <- nil
	waitFor(t, 90*time.Second, fmt.Sprintf("%d tasks delivered", n), func() bool { return sink.delivered() >= n })
	for _, p := range procs[1:] {
		p.stop(t)
	}
	waitFor(t, 5*time.Second, "every lease given back or expired", func() bool { return rdb.ZCard(context.Background(), leases).Val() == 0 })
	sink.mu.Lock()
	defer sink.mu.Unlock()
	t.Logf("concurrency 5 × 3 processes: at most %d calls open at once; %d tasks delivered %v after the kill", sink.maxOpen, len(sink.payloads), time.Since(killed).Round(time.Millisecond))
	if sink.maxOpen > 5 {
		t.Errorf("%d calls open at once, want at most 5", sink.maxOpen)
	}
	if sink.maxOpen < 4 {
		t.Errorf("at most %d calls open at once under a backlog, want the cap (5) used", sink.maxOpen)
	}
	for i := range n {
		if sink.payloads[fmt.Sprintf(`{"n":%d}`, i)] == 0 {
			t.Errorf("task %d never delivered", i)
		}
	}
}

// Three shaper processes, `key_concurrency: 1` over 10 tenants and calls of
// 100ms: never two calls of one tenant open at once, several tenants at
// once, every task delivered once.
func TestKeyConcurrencyThreeProcesses(t *testing.T) {
	var mu sync.Mutex
	open, maxOpen, most := map[string]int{}, map[string]int{}, 0
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var tt tenantTask
		json.Unmarshal(b, &tt)
		mu.Lock()
		open[tt.T]++
		maxOpen[tt.T] = max(maxOpen[tt.T], open[tt.T])
		n := 0
		for _, c := range open {
			n += c
		}
		most = max(most, n)
		mu.Unlock()
		time.Sleep(100 * time.Millisecond) // the call time the cap is about
		mu.Lock()
		open[tt.T]--
		seen[string(b)]++
		mu.Unlock()
	}))
	defer srv.Close()
	prefix := redistest.Prefix(t)
	cfg := daemonYAML(t, prefix, fmt.Sprintf(`  - name: api
    rate: 100/s
    key_concurrency: 1
    handler: {type: http, url: %q, timeout: 5s}
`, srv.URL))
	p := fairProducer(t, cfg)
	const keys, per = 10, 15
	for i := range per {
		for k := range keys {
			b, _ := json.Marshal(tenantTask{fmt.Sprintf("k%d", k), i})
			if _, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Key: fmt.Sprintf("k%d", k), Payload: b}); err != nil {
				t.Fatal(err)
			}
		}
	}
	procs := []*proc{startShaper(t, cfg), startShaper(t, cfg), startShaper(t, cfg)}
	waitFor(t, 60*time.Second, "every task delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == keys*per
	})
	for _, pr := range procs {
		pr.stop(t)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("key_concurrency 1 × 3 processes: at most %d calls open at once over %d keys; per key at most %v", most, keys, maxOpen)
	for k, m := range maxOpen {
		if m > 1 {
			t.Errorf("%s had %d calls open at once, want at most 1", k, m)
		}
	}
	if most < 5 {
		t.Errorf("at most %d calls open at once over %d keys, want several keys served together (≥ 5)", most, keys)
	}
	for b, n := range seen {
		if n != 1 {
			t.Errorf("%s delivered %d times, want once", b, n)
		}
	}
}
