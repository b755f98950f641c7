package shaping

import (
	"container/list"
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// lane reserves slots for one downstream's waiting workers in this
// process, in FIFO order, with one script call for a run of waiters
// (ReserveN). When the bucket is full it sleeps until the reply says room
// opens, so waiting workers never poll Redis: the calls per release are a
// small constant whatever the number of workers and processes.
type lane struct {
	r    *runner
	mu   sync.Mutex
	q    *list.List // of *waiter
	kick chan struct{}
	// When the bucket has room at once (demand below the rate), the lane
	// reserves a few slots more than its waiters need and keeps them as
	// stock, so that a worker coming back from its call takes a slot
	// without a round trip. A stocked slot is a real reservation: used
	// within its late tolerance or wasted, never replayed.
	stock     []grant // slots on the Redis clock, oldest first
	stockCost int64
	stockSeq  uint64 // the breaker's seq when the stock was reserved
	behind    bool   // the last reservation started at once (the bucket had room)
	// backoff and lastLog pace the run loop through Redis errors (its alone)
	backoff time.Duration
	lastLog time.Time
}

// maxStock bounds the slots a lane reserves ahead of its waiters.
const maxStock = 32

// maxBatch bounds how many waiters one call serves.
const maxBatch = 256

func newLane(r *runner) *lane {
	return &lane{r: r, q: list.New(), kick: make(chan struct{}, 1)}
}

// wait queues a worker for a slot of cost units for key (at the front
// when it is retrying a wasted slot) and blocks until the lane grants one.
func (l *lane) wait(ctx context.Context, cost int64, key string, front bool) (grant, error) {
	w := &waiter{cost: cost, key: key, queued: true, deadline: deadlineOf(ctx), order: takenOf(ctx).order, done: make(chan grant, 1)}
	l.mu.Lock()
	if l.pastDeadlineNow(w) {
		l.mu.Unlock()
		return grant{}, ErrDeadlinePassed
	}
	g, ok := l.fromStock(cost)
	if ok {
		if l.tooLate(w, g.slot) {
			l.unstock(g)
			g = grant{err: ErrDeadlinePassed}
		}
		l.mu.Unlock()
		inLine(ctx)
		return g, g.err
	}
	var e *list.Element
	switch {
	case front:
		e = l.q.PushFront(w)
	default:
		e = l.q.PushBack(w)
	}
	l.mu.Unlock()
	inLine(ctx) // the next task of the take may queue behind w now
	select {
	case l.kick <- struct{}{}:
	default:
	}
	return l.await(ctx, w, e)
}

// await blocks until w, queued as e, is granted a slot, or leaves unsent:
// its context ends, the dispatcher stops, or the downstream is paused
// (errGiveBack).
func (l *lane) await(ctx context.Context, w *waiter, e *list.Element) (grant, error) {
	var paused <-chan struct{}
	if l.r.srv == nil {
		paused = l.r.pause.signal() // under the engine a paused downstream holds nothing
	}
	var back error // errGiveBack: the task leaves unsent
wait:
	for {
		select {
		case g := <-w.done:
			return g, g.err
		case <-ctx.Done():
			break wait
		case <-l.r.d.stopping:
			break wait
		case <-paused:
			back = errGiveBack
			break wait
		}
	}
	l.mu.Lock()
	if w.queued { // else granted meanwhile: that slot is wasted, never replayed
		l.remove(e)
	}
	l.mu.Unlock()
	switch {
	case ctx.Err() != nil:
		return grant{}, ctx.Err()
	case back != nil:
		return grant{}, back
	}
	return grant{}, errStopping
}

// fromStock takes the oldest stocked slot of cost that is not yet too late
// to use (l.mu held); slots past their tolerance are wasted.
func (l *lane) fromStock(cost int64) (grant, bool) {
	if l.stockCost != cost {
		return grant{}, false
	}
	l.dropStale()
	if len(l.stock) == 0 {
		return grant{}, false
	}
	g := l.stock[0]
	l.stock = l.stock[1:]
	return g, true
}

// dropStale wastes the stocked slots at the front that are past half
// their late tolerance, too late to hand out (l.mu held).
func (l *lane) dropStale() {
	now, off, tol := l.r.d.cfg.Clock.Now(), l.r.offset.get(), l.r.lateTolerance(l.stockCost)/2
	i := 0
	for i < len(l.stock) && now.Sub(l.stock[i].slot.Add(off)) > tol {
		i++
	}
	l.r.wasted(l.stockCost, l.stock[:i]...)
	l.stock = l.stock[i:]
}

// restock makes the stock one of cost in the breaker's spell seq: a stock
// of another cost or spell is wasted, its quota units given back (l.mu
// held).
func (l *lane) restock(cost int64, seq uint64) {
	if l.stockCost != cost || l.stockSeq != seq {
		l.r.wasted(l.stockCost, l.stock...)
		l.stock, l.stockCost, l.stockSeq = nil, cost, seq
	}
}

// head returns the cost of the first waiter and how many waiters from the
// front share it (at most maxBatch), or 0 when none wait. On a downstream
// with priorities they also share the first's priority, which the claim
// says (the zero Claim without priorities).
func (l *lane) head() (cost int64, n int, c Claim) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropExpired()
	prio := l.r.ds.Priority != nil
	var level int64
	for e := l.q.Front(); e != nil && n < maxBatch; e = e.Next() {
		w := e.Value.(*waiter)
		if n == 0 {
			cost, level = w.cost, w.priority()
		} else if w.cost != cost || prio && w.priority() != level {
			break
		}
		n++
	}
	if prio && level >= 1 {
		c = Claim{Level: int(level), Waiting: n}
	}
	return cost, n, c
}

// hand gives the waiters of cost at the front their reserved slots, in
// order; slots left over (waiters gone meanwhile, or reserved ahead) go to
// the stock.
func (l *lane) hand(cost int64, res Reservation, seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	j := 0
	for ; j < res.Count; j++ {
		e := l.frontFor(res.SlotN(j))
		if e == nil || e.Value.(*waiter).cost != cost {
			break
		}
		l.remove(e).done <- grant{slot: res.SlotN(j), now: res.Now, seq: seq, issued: res.seqN(j)}
	}
	if j == res.Count {
		return
	}
	// slots no waiter took: stock for the next ones
	l.restock(cost, seq)
	for ; j < res.Count; j++ {
		l.stock = append(l.stock, grant{slot: res.SlotN(j), now: res.SlotN(j), seq: seq, issued: res.seqN(j)})
	}
}

// refuse gives the first waiter, of cost, an error no wait would cure.
func (l *lane) refuse(cost int64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.q.Front(); e != nil && e.Value.(*waiter).cost == cost {
		l.remove(e).done <- grant{err: err}
	}
}

// remove takes e's waiter out of the queue (l.mu held).
func (l *lane) remove(e *list.Element) *waiter {
	w := e.Value.(*waiter)
	l.q.Remove(e)
	w.queued = false
	return w
}

// minBackoff is the run loop's first wait after a Redis error; it
// doubles up to maxBackoff while the errors last.
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = 2 * time.Second
)

// reserve reserves up to ask slots of cost starting within maxWait, and
// records what the reply says (the clock offset, the reservation's
// metrics). The run loop's alone.
func (l *lane) reserve(cost int64, ask int, maxWait time.Duration, c Claim) (Reservation, error) {
	r := l.r
	ctx, cancel := context.WithTimeout(context.Background(), r.d.cfg.RedisTimeout)
	res, err := r.d.buckets.ReserveFor(ctx, r.bucket(), cost, ask, maxWait, c)
	cancel()
	if err != nil {
		return res, err
	}
	l.backoff = minBackoff
	recv := r.d.cfg.Clock.Now()
	r.offset.observe(recv.Sub(res.Now), recv)
	r.observeReservation(res)
	l.setBehind(res.Count > 0 && res.Wait == 0)
	if res.Count > 0 {
		r.observeWaits(res)
	}
	return res, nil
}

// trouble logs a Redis error (at most every 10s) and waits the backoff,
// doubling it; false when the dispatcher stops.
func (l *lane) trouble(what string, err error) bool {
	r := l.r
	if time.Since(l.lastLog) > 10*time.Second {
		r.d.log.Warn("shaping: "+what+"; holding tasks until Redis answers", "downstream", r.ds.Name, "err", err)
		l.lastLog = time.Now()
	}
	if !l.sleep(l.backoff) {
		return false
	}
	l.backoff = min(l.backoff*2, maxBackoff)
	return true
}

// full waits, after a reservation that found the bucket full (res), until
// it has room for n waiters of cost; false when the dispatcher stops.
func (l *lane) full(res Reservation, cost int64, n int) bool {
	if m := l.r.d.m; m != nil {
		m.BucketFull.WithLabelValues(l.r.ds.Name).Inc()
	}
	return l.sleep(l.roomIn(res, cost, n))
}

func (l *lane) behindNow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.behind && len(l.stock) == 0
}

func (l *lane) setBehind(b bool) {
	l.mu.Lock()
	l.behind = b
	l.mu.Unlock()
}

// roomIn is how long until the bucket has room for the waiters: the first
// slot opens when the wait falls back to the look-ahead (MaxWait), and the
// lane waits for room for a share of its waiters (an eighth of the bucket,
// or half of a shorter look-ahead) so that one call serves several. A
// random part of one interval keeps the lanes of several processes from
// calling at the same instant.
func (l *lane) roomIn(res Reservation, cost int64, n int) time.Duration {
	r := l.r
	rate := r.rate.Load()
	iv := rate.Interval(cost)
	ahead := r.lookahead()
	share := min(max(int(rate.UnitsIn(r.ds.MaxWait)/max(cost, 1))/8, 1), max(int(rate.UnitsIn(ahead)/max(cost, 1))/2, 1))
	k := min(n, share)
	d := res.Wait - ahead + time.Duration(k-1)*iv
	return max(d, iv) + time.Duration(rand.Int64N(int64(iv)+1))
}

// sleepOr waits d, or until ch is closed; false when the dispatcher stops.
func (l *lane) sleepOr(d time.Duration, ch <-chan struct{}) bool {
	t := l.r.d.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
	case <-ch:
	case <-l.r.d.stopping:
		return false
	}
	return true
}

// sleep waits d, or until a control change wakes the runner; false when
// the dispatcher stops.
func (l *lane) sleep(d time.Duration) bool {
	return l.sleepOr(d, l.r.wakeCh())
}

// dropExpired refuses, with ErrDeadlinePassed, every waiter whose deadline
// has passed (l.mu held), so the lane never reserves a slot for it.
func (l *lane) dropExpired() {
	now := l.r.d.cfg.Clock.Now()
	for e := l.q.Front(); e != nil; {
		next := e.Next()
		if w := e.Value.(*waiter); pastDeadline(w.deadline, now) {
			l.remove(e).done <- grant{err: ErrDeadlinePassed}
		}
		e = next
	}
}

// tooLate reports whether w cannot use a slot starting at slot on the
// Redis clock: it would start after w's deadline.
func (l *lane) tooLate(w *waiter, slot time.Time) bool {
	return pastDeadline(w.deadline, slot.Add(l.r.offset.get()))
}

// frontFor is the first waiter that can use a slot starting at slot (l.mu
// held): waiters before it that would start after their deadline are
// refused, and the slot goes to the next one.
func (l *lane) frontFor(slot time.Time) *list.Element {
	e := l.q.Front()
	for e != nil && l.tooLate(e.Value.(*waiter), slot) {
		l.remove(e).done <- grant{err: ErrDeadlinePassed}
		e = l.q.Front()
	}
	return e
}

// pastDeadlineNow reports whether w's deadline has passed (l.mu held).
func (l *lane) pastDeadlineNow(w *waiter) bool {
	return pastDeadline(w.deadline, l.r.d.cfg.Clock.Now())
}

// unstock puts a stocked slot back in front, for the next waiter: the one
// that took it cannot start by its deadline, and every other slot the lane
// could get it starts later still (l.mu held).
func (l *lane) unstock(g grant) {
	l.stock = append([]grant{g}, l.stock...)
}
