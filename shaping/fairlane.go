package shaping

import (
	"container/list"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/shaper-io/shaper/internal/metrics"
)

// fairOrder orders a fair downstream's waiting workers in this process:
// the keys with the fewest waiters here per unit of weight go first, each
// key's waiters in their arrival order, a retry of a wasted slot before
// all. The order is taken afresh each time the lane serves (sort), from
// the counts of that moment. The feeder (fair.lua) already hands tasks to
// the workers in fair order; the lane's part is to let a key that holds
// few waiters pass the ones a big backlog filled it with (the workers hold
// tasks taken before the key arrived), so a late key is released at once,
// and after that at the rate its tasks come: a light key is served as its
// tasks arrive, which bounds its waiters, so the big key is served
// whenever the light ones have none. (Tags fixed when a waiter queues, as
// in start-time fair queueing, did worse here: a key arriving at its share
// queues like a random walk, and counts frozen at insertion let a big
// key's newcomers pass an old waiter without end.)
type fairOrder struct {
	f       *Fairness
	waiting map[string]int // key → waiters queued
}

func newFairOrder(f *Fairness) *fairOrder {
	return &fairOrder{f: f, waiting: map[string]int{}}
}

// insert queues w (at the front when front) and returns its element.
func (o *fairOrder) insert(q *list.List, w *waiter, front bool) *list.Element {
	o.waiting[w.key]++
	if front {
		w.tag = math.Inf(-1)
		return q.PushFront(w)
	}
	return q.PushBack(w)
}

// sort orders q by its keys' waiters per unit of weight now, stably.
func (o *fairOrder) sort(q *list.List) {
	if q.Len() < 2 {
		return
	}
	els := make([]*list.Element, 0, q.Len())
	for e := q.Front(); e != nil; e = e.Next() {
		w := e.Value.(*waiter)
		if w.tag != math.Inf(-1) {
			w.tag = float64(o.waiting[w.key]) / o.f.Weight(w.key)
		}
		els = append(els, e)
	}
	sort.SliceStable(els, func(i, j int) bool { return els[i].Value.(*waiter).tag < els[j].Value.(*waiter).tag })
	for _, e := range els {
		q.MoveToBack(e)
	}
}

// removed notes that w left the queue.
func (o *fairOrder) removed(w *waiter) {
	if n := o.waiting[w.key] - 1; n > 0 {
		o.waiting[w.key] = n
	} else {
		delete(o.waiting, w.key)
	}
}

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
		m.Fair.KeyReleases.WithLabelValues(ds, t.k).Set(float64(t.n))
	}
	return j
}
