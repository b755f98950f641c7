package shaping

import (
	"sort"
	"sync"
	"time"

	"github.com/shaper-io/shaper/internal/metrics"
)

// fairStats counts a fair downstream's releases in this process per key
// over the last minute, in six 10s buckets, for the Jain index and the
// top keys' series.
type fairStats struct {
	mu      sync.Mutex
	buckets [6]map[string]*keyCount
	cur     int
	start   time.Time // of the current bucket
	pub     time.Time // last publish
}

type keyCount struct {
	n         int
	backlog   bool // released while another of its tasks waited here
	lastShare float64
}

const fairBucket = 10 * time.Second

func (s *fairStats) release(key string, backlogged bool, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roll(now)
	b := s.buckets[s.cur]
	c := b[key]
	if c == nil {
		c = &keyCount{}
		b[key] = c
	}
	c.n++
	c.backlog = c.backlog || backlogged
}

// roll starts new buckets for the time passed (s.mu held).
func (s *fairStats) roll(now time.Time) {
	if s.buckets[s.cur] == nil || s.start.IsZero() {
		s.buckets[s.cur], s.start = map[string]*keyCount{}, now
	}
	for i := 0; now.Sub(s.start) >= fairBucket && i < len(s.buckets); i++ {
		s.cur = (s.cur + 1) % len(s.buckets)
		s.buckets[s.cur] = map[string]*keyCount{}
		s.start = s.start.Add(fairBucket)
	}
	if now.Sub(s.start) >= fairBucket {
		s.start = now
	}
}

// minute sums the last minute per key.
func (s *fairStats) minute(now time.Time) map[string]*keyCount {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roll(now)
	out := map[string]*keyCount{}
	for _, b := range s.buckets {
		for k, c := range b {
			o := out[k]
			if o == nil {
				o = &keyCount{}
				out[k] = o
			}
			o.n += c.n
			o.backlog = o.backlog || c.backlog
		}
	}
	return out
}

// Jain is Jain's fairness index of xs: (Σx)² / (n·Σx²), 1 when all are
// equal, 1/n when one takes everything; 1 for none.
func Jain(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// publish sets the Jain index over the last minute's releases per unit of
// weight of the keys that had a backlog, and the top keys' series, at most
// once a second; it returns the index, or -1 when it did not publish.
func (s *fairStats) publish(m *metrics.Metrics, ds string, f *Fairness, now time.Time) float64 {
	s.mu.Lock()
	due := now.Sub(s.pub) >= time.Second
	if due {
		s.pub = now
	}
	s.mu.Unlock()
	if !due {
		return -1
	}
	counts := s.minute(now)
	var xs []float64
	type kn struct {
		k string
		n int
	}
	var top []kn
	for k, c := range counts {
		if c.backlog {
			xs = append(xs, float64(c.n)/f.Weight(k))
		}
		top = append(top, kn{k, c.n})
	}
	j := Jain(xs)
	if m == nil {
		return j
	}
	m.Fair.Jain.WithLabelValues(ds).Set(j)
	sort.Slice(top, func(a, b int) bool { return top[a].n > top[b].n || top[a].n == top[b].n && top[a].k < top[b].k })
	m.Fair.KeyReleases.DeletePartialMatch(map[string]string{"downstream": ds})
	for _, t := range top[:min(len(top), metrics.FairTopKeys)] {
		m.Fair.KeyReleases.WithLabelValues(ds, metrics.SafeKey(t.k)).Set(float64(t.n))
	}
	return j
}
