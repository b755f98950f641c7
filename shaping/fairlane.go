package shaping

import (
	"container/list"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/shaper-io/shaper/internal/fairindex"
	"github.com/shaper-io/shaper/internal/metrics"
)

// fairOrder orders a fair downstream's waiting workers in this process:
// least attained service first. Each key's service here is the units it
// was served per unit of its weight, decaying with time constant
// fairMemory; at each serve (sort) the waiters are ordered by the service
// their key would have when their turn came (a key's i-th waiter counts
// the i before it), each key's waiters in arrival order, a retry of a
// wasted slot before all.
//
// The feeder (fair.lua) already hands tasks to the workers in fair order;
// the lane's part is to let a key that was served little here pass the
// tasks a big backlog filled the workers with before it arrived, so a late
// key is released at once and after that as its tasks come, while keys
// that each hold several waiters here share the lane by weight. It cannot
// starve a key: a key that waits is not served, so its service decays
// below that of every key that is, and it goes first within about
// fairMemory. It keeps a key's credit across the moments the key has no
// waiter (start-time tags fixed when a waiter queues would not), so a key
// arriving at its share does not queue like a random walk.
//
// A key's service counts the other processes' too (others, from the
// shared count in Redis: fairsvc.lua, exchanged on every feed, about four
// times a second), so that the last tasks of a light key, held by one
// process, go at the light key's share of every process's slots rather
// than of that process's alone. The order is work-conserving: it never
// holds a slot back (a key ceiling, keyCeiling, does: a key past its
// ceiling waits).
type fairOrder struct {
	f       *Fairness
	waiting map[string]int      // key → waiters queued
	svc     map[string]attained // key → service here
	others  map[string]attained // key → service in the other processes, at the last exchange
	inc     map[string]float64  // key → service here since the last exchange
	lifted  map[string]float64  // key → the service it started at here (lift), to report at the next exchange
	credit  map[string]float64  // key → the credit its lift gave it, while it has waiters here
	// activeKeys: keys with tasks parked at the last feed (FairState.Keys)
	activeKeys int
	next       map[string]float64 // sort's scratch: key → service at its next turn
	sweepAt    int                // svc's size that triggers a sweep of faded keys
}

// fadedOut is service no longer told apart from none.
const fadedOut = 1e-3

// maxExchangeKeys bounds the keys whose shared service one exchange asks.
const maxExchangeKeys = 256

// attained is a key's service: v units per weight, as of at.
type attained struct {
	v  float64
	at time.Time
}

// fairMemory is how long the lane remembers service, as long as the
// count the processes share does (fairindex.ServiceMemory): long enough to
// span a few turns of every key at the lane's pace (keys that keep waiters
// here share by weight over it), short enough that a key gone quiet is not
// owed a burst of more than fairMemory of its share when it returns.
const fairMemory = fairindex.ServiceMemory

func newFairOrder(f *Fairness) *fairOrder {
	return &fairOrder{f: f, waiting: map[string]int{}, svc: map[string]attained{}, others: map[string]attained{},
		inc: map[string]float64{}, lifted: map[string]float64{}, credit: map[string]float64{}, next: map[string]float64{}, sweepAt: 64}
}

// faded is a's service at now.
func (a attained) faded(now time.Time) float64 {
	if a.v == 0 {
		return 0
	}
	return a.v * math.Exp(-max(now.Sub(a.at), 0).Seconds()/fairMemory.Seconds())
}

// service is key's service at now, here and in the other processes.
func (o *fairOrder) service(key string, now time.Time) float64 {
	return o.svc[key].faded(now) + o.others[key].faded(now)
}

// served notes that a waiter of key got a slot of cost units at now.
func (o *fairOrder) served(key string, cost int64, now time.Time) {
	u := float64(cost) / o.f.Weight(key)
	o.svc[key] = attained{v: o.svc[key].faded(now) + u, at: now}
	o.inc[key] += u
	if len(o.svc)+len(o.others) > o.sweepAt {
		for _, m := range []map[string]attained{o.svc, o.others} {
			for k := range m {
				if o.waiting[k] == 0 && o.service(k, now) < fadedOut {
					delete(m, k)
				}
			}
		}
		// the next sweep when the map has doubled: O(1) a serve, however
		// many keys were served lately
		o.sweepAt = 2*(len(o.svc)+len(o.others)) + 64
	}
}

// lift starts key, new to the lane (no service lately, no waiter), at the
// least service of the keys waiting here less a credit: start-time fair
// queueing's virtual start. Started at none, a newcomer would be owed a
// backlog's whole faded service and take every slot until it caught up;
// with no credit it would never make up the time its first tasks take to
// reach the lanes. The credit is its share over liftCredit, among the
// keys waiting here or parked at the last feed (activeKeys), whichever
// are more. The least counts the
// earlier newcomers' credit back (service + credit), so a stream of
// newcomers start from one point; a waiting key with no service keeps
// newcomers at none. docs/algorithms.md has the measurements.
func (o *fairOrder) lift(key string, now time.Time, rate float64) {
	floor, found, sw := 0.0, false, o.f.Weight(key)
	for k := range o.waiting {
		sw += o.f.Weight(k)
		if v := o.service(k, now) + o.credit[k]; !found || v < floor {
			floor, found = v, true
		}
	}
	if !found || floor < fadedOut {
		return // none waits, or one that has had no service: start at none too
	}
	sw = max(sw, float64(o.activeKeys))
	v := floor - min(liftCredit.Seconds()*max(rate, 0)/sw, floor)
	o.credit[key] = floor - v
	if v >= fadedOut {
		o.svc[key] = attained{v: v, at: now}
		o.lifted[key] = v
	}
}

// liftCredit is how long a new key's first tasks take to reach the lanes
// under a backlog: the lanes' reservation horizon (fairindex.Lookahead;
// the take picks the key's task at once).
const liftCredit = fairindex.Lookahead

// exchanging takes the service to report and the keys to ask about: the
// keys with waiters here, at most maxExchangeKeys. lifted says where the
// keys lifted since the last exchange started, for the shared count to
// start them there too (unless another process served them first).
func (o *fairOrder) exchanging() (inc, lifted map[string]float64, want []string) {
	inc, o.inc = o.inc, map[string]float64{}
	lifted, o.lifted = o.lifted, map[string]float64{}
	for k := range o.waiting {
		if len(want) == maxExchangeKeys {
			break
		}
		want = append(want, k)
	}
	return inc, lifted, want
}

// exchanged takes the shared service of the keys asked (which counts
// what this process reported), or puts inc back when the exchange failed.
func (o *fairOrder) exchanged(inc, lifted, shared map[string]float64, err error, now time.Time) {
	if err != nil {
		for k, v := range inc {
			o.inc[k] += v
		}
		for k, v := range lifted {
			if _, ok := o.lifted[k]; !ok {
				o.lifted[k] = v
			}
		}
		return
	}
	for k, v := range shared {
		if d := v - o.svc[k].faded(now); d > fadedOut {
			o.others[k] = attained{v: d, at: now}
		} else {
			delete(o.others, k)
		}
	}
}

// insert queues w (at the front when front) and returns its element; a
// key new to the lane is lifted first (rate: the downstream's, units a
// second).
func (o *fairOrder) insert(q *list.List, w *waiter, front bool, now time.Time, rate float64) *list.Element {
	newcomer := o.waiting[w.key] == 0 && o.service(w.key, now) < fadedOut
	if newcomer {
		o.lift(w.key, now, rate)
	}
	o.waiting[w.key]++
	if front || newcomer {
		// a retry goes first; a newcomer's first waiter next, in arrival
		// order, so it never waits behind earlier newcomers' credit (with
		// many keys arriving at once, their waiters would hold its first
		// release back for seconds)
		w.tag = math.Inf(-1)
	}
	if front {
		return q.PushFront(w)
	}
	return q.PushBack(w)
}

// sort orders q by the service each waiter's key would have at its turn,
// as of now, stably.
func (o *fairOrder) sort(q *list.List, now time.Time) {
	if q.Len() < 2 {
		return
	}
	clear(o.next)
	els := make([]*list.Element, 0, q.Len())
	for e := q.Front(); e != nil; e = e.Next() {
		w := e.Value.(*waiter)
		if w.tag != math.Inf(-1) {
			v, ok := o.next[w.key]
			if !ok {
				v = o.service(w.key, now)
			}
			w.tag = v
			o.next[w.key] = v + float64(w.cost)/o.f.Weight(w.key)
		}
		els = append(els, e)
	}
	// priority first (a waiter's take order carries it: serveTake), then
	// fair share among the waiters of one priority
	sort.SliceStable(els, func(i, j int) bool {
		a, b := els[i].Value.(*waiter), els[j].Value.(*waiter)
		if pa, pb := a.priority(), b.priority(); pa != pb {
			return pa < pb
		}
		return a.tag < b.tag
	})
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
		delete(o.credit, w.key)
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
		m.Fair.KeyReleases.WithLabelValues(ds, metrics.SafeKey(t.k)).Set(float64(t.n))
	}
	return j
}
