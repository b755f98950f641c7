package main_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/redistest"
)

// windowAPI is a third-party API with a fixed window of limit calls per
// window that only announces it (X-RateLimit-Limit/Remaining/Reset, Reset
// in seconds from now) and answers 429 past it; shaper has no quota
// configured for it.
type windowAPI struct {
	limit  int
	window time.Duration

	mu      sync.Mutex
	start   time.Time // of the current window
	used    int
	ok      map[string]int
	refused []time.Time
	first   time.Time
	srv     *httptest.Server
}

func newWindowAPI(limit int, window time.Duration) *windowAPI {
	a := &windowAPI{limit: limit, window: window, ok: map[string]int{}}
	a.srv = httptest.NewServer(http.HandlerFunc(a.serve))
	return a
}

func (a *windowAPI) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	if a.first.IsZero() {
		a.first = now
	}
	if now.Sub(a.start) >= a.window {
		a.start, a.used = now, 0
	}
	reset := a.start.Add(a.window).Sub(now)
	h := w.Header()
	h.Set("X-RateLimit-Limit", strconv.Itoa(a.limit))
	h.Set("X-RateLimit-Reset", strconv.Itoa(int((reset+time.Second-1)/time.Second)))
	if a.used >= a.limit {
		h.Set("X-RateLimit-Remaining", "0")
		a.refused = append(a.refused, now)
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	a.used++
	h.Set("X-RateLimit-Remaining", strconv.Itoa(a.limit-a.used))
	a.ok[string(b)]++
}

// Three shaper processes at 50/s in front of an API that allows 30 calls
// per 2s and only says so in its answers' X-RateLimit-* headers: after the
// first answer, no 429 (the announced budget paces every process through
// Redis), and every task is delivered once.
func TestAnnouncedLimitThreeProcesses(t *testing.T) {
	api := newWindowAPI(30, 2*time.Second)
	defer api.srv.Close()
	prefix := redistest.Prefix(t)
	const n = 150
	enqueue(t, prefix, n)
	cfg := daemonYAML(t, prefix, fmt.Sprintf(`  - name: api
    rate: 50/s
    max_wait: 200ms
    handler: {type: http, url: %q, timeout: 5s}
`, api.srv.URL))
	procs := []*proc{startShaper(t, cfg), startShaper(t, cfg), startShaper(t, cfg)}
	waitFor(t, 60*time.Second, fmt.Sprintf("%d tasks delivered", n), func() bool {
		api.mu.Lock()
		defer api.mu.Unlock()
		return len(api.ok) >= n
	})
	for _, p := range procs {
		p.stop(t)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	late := 0
	for _, at := range api.refused {
		if at.Sub(api.first) > time.Second { // after the first answers were read
			late++
		}
	}
	t.Logf("announced 30 per 2s, 3 processes at 50/s: %d delivered in %v, %d refused in all, %d after the first second",
		len(api.ok), time.Since(api.first).Round(time.Millisecond), len(api.refused), late)
	if late > 0 {
		t.Errorf("%d calls refused (429) after the first answers, want 0", late)
	}
	for p, c := range api.ok {
		if c != 1 {
			t.Errorf("%s delivered %d times, want once", p, c)
		}
	}
}
