// Package testsink is a recording HTTP downstream for tests and benchmarks:
// it notes when each request arrived and which task it carried, and can be
// told to answer 429 with a Retry-After for a while, to answer 429 above
// a rate (an API with a hard quota), or to be down (500) for a while.
package testsink

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"sync"
	"time"
)

// Hit is one request the sink received.
type Hit struct {
	At      time.Time
	TaskID  string
	Payload string
	Status  int
	Wake    time.Time
	Process string    // X-Shaper-Process: which shaper released it
	Slot    time.Time // the slot shaper reserved for it (X-Shaper-Slot), if sent
}

// Sink records requests. Safe for concurrent use.
type Sink struct {
	srv *httptest.Server

	mu        sync.Mutex
	hits      []Hit
	throttle  time.Time     // answer 429 until then
	retry     time.Duration // Retry-After to send while throttling
	quota     float64       // >0: answer 429 when the last second saw more than this many 2xx
	downFor   time.Duration // answer 500 for this long from downFrom
	downFrom  time.Time     // the first request after DownFor
	recentOK  []time.Time
	okSeen    map[string]struct{} // payloads with a 2xx hit (DistinctOK)
	onRequest func(Hit) (status int, retryAfter time.Duration)
	delay     time.Duration // each answer comes this long after its request
}

// New starts a sink on a loopback port.
func New() *Sink {
	s := &Sink{}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// URL of the sink.
func (s *Sink) URL() string { return s.srv.URL }

// Close stops the sink.
func (s *Sink) Close() { s.srv.Close() }

// ThrottleFor makes the sink answer 429 with Retry-After: retry for d.
func (s *Sink) ThrottleFor(d, retry time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.throttle = time.Now().Add(d)
	s.retry = retry
}

// SetQuota makes the sink answer a bare 429 (no Retry-After) to requests beyond
// perSec successful ones in the trailing second; 0 turns it off.
func (s *Sink) SetQuota(perSec float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.quota = perSec
}

// DownFor makes the sink answer 500 for d from its next request on (an
// outage), then as before.
func (s *Sink) DownFor(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.downFor, s.downFrom = d, time.Time{}
}

// Down is when the outage DownFor set began (its first request) and ends;
// zero before that request.
func (s *Sink) Down() (from, to time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.downFrom.IsZero() {
		return time.Time{}, time.Time{}
	}
	return s.downFrom, s.downFrom.Add(s.downFor)
}

// SetDelay makes each answer come d after its request (a call that
// takes that long: calls in flight overlap); 0 answers at once.
func (s *Sink) SetDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

// OnRequest lets a test pick the answer per request (status 0: default).
func (s *Sink) OnRequest(f func(Hit) (int, time.Duration)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onRequest = f
}

func (s *Sink) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	now := time.Now()
	h := Hit{At: now, TaskID: r.Header.Get("X-Shaper-Task-Id"), Payload: string(body), Status: http.StatusOK,
		Process: r.Header.Get("X-Shaper-Process")}
	if us, err := strconv.ParseInt(r.Header.Get("X-Shaper-Released"), 10, 64); err == nil {
		h.Wake = time.UnixMicro(us)
	}
	if us, err := strconv.ParseInt(r.Header.Get("X-Shaper-Slot"), 10, 64); err == nil {
		h.Slot = time.UnixMicro(us)
	}
	s.mu.Lock()
	var retry time.Duration
	if s.downFor > 0 && s.downFrom.IsZero() {
		s.downFrom = now
	}
	switch {
	case s.downFor > 0 && now.Sub(s.downFrom) < s.downFor:
		h.Status = http.StatusInternalServerError
	case now.Before(s.throttle):
		h.Status, retry = http.StatusTooManyRequests, s.retry
	case s.quota > 0:
		cut := 0
		for cut < len(s.recentOK) && now.Sub(s.recentOK[cut]) >= time.Second {
			cut++
		}
		s.recentOK = s.recentOK[cut:]
		if float64(len(s.recentOK)) >= s.quota {
			h.Status = http.StatusTooManyRequests // bare 429: no Retry-After
		}
	}
	if s.onRequest != nil {
		if st, ra := s.onRequest(h); st != 0 {
			h.Status, retry = st, ra
		}
	}
	if h.Status < 300 {
		s.recentOK = append(s.recentOK, now)
		if s.okSeen == nil {
			s.okSeen = map[string]struct{}{}
		}
		s.okSeen[h.Payload] = struct{}{}
	}
	s.hits = append(s.hits, h)
	delay := s.delay
	s.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay) // the call's own time, not a wait for a state
	}
	if retry > 0 {
		w.Header().Set("Retry-After", strconv.FormatFloat(retry.Seconds(), 'f', -1, 64))
	}
	w.WriteHeader(h.Status)
}

// Hits returns a copy of every request so far, in arrival order.
func (s *Sink) Hits() []Hit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Hit(nil), s.hits...)
}

// DistinctOK counts the distinct payloads with a successful (2xx) hit, in
// O(1): a poll for "all delivered" then costs nothing however many hits
// there are (copying OK() each poll is quadratic over a run and steals
// the CPU the processes under test need).
func (s *Sink) DistinctOK() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.okSeen)
}

// OK returns the successful (2xx) hits.
func (s *Sink) OK() []Hit {
	var out []Hit
	for _, h := range s.Hits() {
		if h.Status < 300 {
			out = append(out, h)
		}
	}
	return out
}

// Delivered counts the successful hits per payload.
func (s *Sink) Delivered() map[string]int {
	seen := map[string]int{}
	for _, h := range s.OK() {
		seen[h.Payload]++
	}
	return seen
}

// Count is the number of successful hits.
func (s *Sink) Count() int { return len(s.OK()) }

// Times extracts arrival times.
func Times(hs []Hit) []time.Time {
	out := make([]time.Time, len(hs))
	for i, h := range hs {
		out[i] = h.At
	}
	return out
}

// Between counts the events in [from, to).
func Between(ts []time.Time, from, to time.Time) int {
	n := 0
	for _, t := range ts {
		if !t.Before(from) && t.Before(to) {
			n++
		}
	}
	return n
}

// MaxInWindow is the most events inside any window of length w.
func MaxInWindow(ts []time.Time, w time.Duration) int {
	s := append([]time.Time(nil), ts...)
	sort.Slice(s, func(i, j int) bool { return s[i].Before(s[j]) })
	best, j := 0, 0
	for i := range s {
		for s[i].Sub(s[j]) >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// Rate is (n-1)/(last-first): the achieved rate of a run of events.
func Rate(ts []time.Time) float64 {
	if len(ts) < 2 {
		return 0
	}
	s := append([]time.Time(nil), ts...)
	sort.Slice(s, func(i, j int) bool { return s[i].Before(s[j]) })
	return float64(len(s)-1) / s[len(s)-1].Sub(s[0]).Seconds()
}

// Span is last-first.
func Span(ts []time.Time) time.Duration {
	if len(ts) < 2 {
		return 0
	}
	s := append([]time.Time(nil), ts...)
	sort.Slice(s, func(i, j int) bool { return s[i].Before(s[j]) })
	return s[len(s)-1].Sub(s[0])
}
