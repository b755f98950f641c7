package shaping_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"
)

// standIn is a third-party API in the test, on real HTTP: answer decides
// each request's status and headers from the arrival time and the
// arrivals it accepted so far; standIn records every request.
type standIn struct {
	srv    *httptest.Server
	answer func(now time.Time, accepted []time.Time, h http.Header) int
	// delay is how long an answer takes after the request arrived (set
	// before the first request)
	delay time.Duration

	mu       sync.Mutex
	accepted []time.Time     // 2xx arrivals, in order
	refused  []time.Time     // 429 arrivals
	first    time.Time       // when the first answer went out
	seen     map[string]int  // 2xx per payload
	byProc   map[string]bool // X-Shaper-Process of the requests
}

func newStandIn(answer func(now time.Time, accepted []time.Time, h http.Header) int) *standIn {
	s := &standIn{answer: answer, seen: map[string]int{}, byProc: map[string]bool{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

func (s *standIn) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	s.mu.Lock()
	now := time.Now()
	status := s.answer(now, s.accepted, w.Header())
	if s.first.IsZero() {
		s.first = now
	}
	s.byProc[r.Header.Get("X-Shaper-Process")+r.Header.Get("X-Test-Process")] = true
	if status < 300 {
		s.accepted = append(s.accepted, now)
		s.seen[string(body)]++
	} else {
		s.refused = append(s.refused, now)
	}
	s.mu.Unlock()
	if s.delay > 0 {
		time.Sleep(s.delay) // a slow API: the call stays in flight
	}
	w.WriteHeader(status)
}

func (s *standIn) URL() string { return s.srv.URL }
func (s *standIn) Close()      { s.srv.Close() }

func (s *standIn) counts() (ok, refused int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.accepted), len(s.refused)
}

// snapshot returns copies of what standIn recorded.
func (s *standIn) snapshot() (accepted, refused []time.Time, seen map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen = make(map[string]int, len(s.seen))
	for k, v := range s.seen {
		seen[k] = v
	}
	return append([]time.Time(nil), s.accepted...), append([]time.Time(nil), s.refused...), seen
}

// inLast counts the arrivals in (now-w, now].
func inLast(ts []time.Time, now time.Time, w time.Duration) int {
	n := 0
	for i := len(ts) - 1; i >= 0 && now.Sub(ts[i]) < w; i-- {
		n++
	}
	return n
}
