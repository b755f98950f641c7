package take

import (
	"context"
	"slices"
	"time"

	"github.com/shaper-io/shaper/internal/lua"
)

// opTimeout bounds one take, probe or extension.
const opTimeout = 5 * time.Second

// loop is the engine's one scheduling goroutine: it starts each lane's
// take, probe or lease extension when due, applies their results, and
// sleeps until the earliest next check. It runs until ctx ends.
func (e *Engine) loop(ctx context.Context) {
	var lanes []*lane
	byName := map[string]*lane{}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	stopCh := e.stopCh
	for {
		lanes = e.adopt(lanes, byName)
		now := time.Now()
		timer.Reset(e.dispatch(lanes, now).Sub(now))
		select {
		case <-ctx.Done():
			return
		case f := <-e.events:
			f()
			e.drain()
		case name := <-e.wakes:
			if l := byName[name]; l != nil {
				l.wake(time.Now())
			}
		case name := <-e.freed:
			if l := byName[name]; l != nil && l.stuck {
				l.wake(time.Now())
			}
		case <-e.addSig:
		case <-stopCh:
			stopCh = nil
			for _, l := range lanes {
				e.requeueUnstarted(l)
			}
			close(e.quiesced) // no take starts from here on (stopping is set)
		case <-timer.C:
		}
	}
}

// drain applies the events already queued, so that one dispatch follows a
// burst of finishes.
func (e *Engine) drain() {
	for range 256 {
		select {
		case f := <-e.events:
			f()
		default:
			return
		}
	}
}

// adopt moves lanes added since the last call into the loop.
func (e *Engine) adopt(lanes []*lane, byName map[string]*lane) []*lane {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, l := range e.added {
		l.next = time.Now()
		byName[l.d.Name] = l
		lanes = append(lanes, l)
	}
	e.added = nil
	return lanes
}

// dispatch starts every call that is due and returns when the next one
// is. Probes of idle lanes go out as one pipeline.
func (e *Engine) dispatch(lanes []*lane, now time.Time) time.Time {
	wake := now.Add(e.cfg.IdlePoll)
	var probes []*lane
	for _, l := range lanes {
		if len(l.held) > 0 && !l.extending {
			if !now.Before(l.nextExtend) {
				e.startExtend(l, now)
			} else if l.nextExtend.Before(wake) {
				wake = l.nextExtend
			}
		}
		if l.pending || e.stopping.Load() {
			continue
		}
		if l.next.After(now) {
			if l.next.Before(wake) {
				wake = l.next
			}
			continue
		}
		if g := l.d.Gate; g != nil {
			if until := g(now); until.After(now) {
				l.state, l.next = paused, until
				if until.Before(wake) {
					wake = until
				}
				continue
			}
		}
		maintain := now.Sub(l.lastMaintain) >= e.cfg.Maintain
		want := l.free()
		wanted := true
		if l.d.Want != nil {
			w := l.d.Want() - int(l.unstarted.Load())
			want, wanted = min(want, w), w > 0
		}
		switch {
		case !wanted && !maintain:
			// the handler side wants none now: its Wake, or a look after
			// wantRecheck, asks again
			l.next = now.Add(wantRecheck)
			if l.next.Before(wake) {
				wake = l.next
			}
		case l.free() < l.batch():
			// finishes of this process free the budget and dispatch again
		case l.state == idle && !maintain:
			l.pending = true
			probes = append(probes, l)
		default:
			e.startTake(l, now, maintain, max(want, 1))
		}
	}
	if len(probes) > 0 {
		e.startProbes(probes)
	}
	return wake
}

// submit queues op for a worker; false when the queue is full (the caller
// tries again at its next dispatch).
func (e *Engine) submit(op func()) bool {
	select {
	case e.ops <- op:
		return true
	default:
		return false
	}
}

// wantRecheck is how soon a lane whose Want said 0 is looked at again
// without a Wake.
const wantRecheck = 100 * time.Millisecond

func (e *Engine) startTake(l *lane, now time.Time, maintain bool, want int) {
	a := l.args
	if l.d.BudgetNow != nil {
		a.Budget = int64(max(l.d.BudgetNow(), 1))
	}
	a.Slots = int64(min(l.slots, l.free(), want))
	a.Maintain = maintain
	if l.d.Reserve != nil {
		if ra, ok := l.d.Reserve(); ok {
			ra.Cost = 1 // a unit a task, or the cost of a run of more (the script sets it)
			a.Reserve, a.Interval, a.Burst, a.Lead, a.Pause = &ra, 0, 0, l.lead.Microseconds(), l.d.Pause
			a.MaxUnits = l.d.MaxUnits
			if l.d.Ceiling != nil {
				a.Ceiling = l.d.Ceiling()
			}
			if l.d.Leases != nil {
				if a.Leases = l.d.Leases(); a.Leases != nil {
					a.Leases.Token = e.leaseToken()
				}
			}
			l.slots = slotsFor(a.LookAhead, ra.Interval) // at the rate in force
			a.Slots = int64(min(l.slots, l.free(), want))
		}
	}
	if a.Interval == 0 && a.Burst == 0 {
		// no bucket of the take's own: its times are leases and
		// maintenance, which asynq's dequeue and forwarder take from the
		// process's clock too (one TIME fewer per take; a reservation
		// reads TIME itself, once tasks wait)
		a.Now = now.UnixMicro()
	}
	ok := e.submit(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		r, err := e.store.Take(ctx, a)
		cancel()
		at := time.Now()
		e.post(func() { e.applyTake(l, a.Leases, r, err, at) })
	})
	if !ok {
		l.next = now.Add(10 * time.Millisecond)
		return
	}
	l.pending = true
	if maintain {
		l.lastMaintain = now
	}
	e.stats.takes.Add(1)
	e.jobs.Add(1) // a take in flight holds Run's shutdown until its tasks are jobs
}

// applyTake runs in the loop: it starts a job per task taken and sets the
// lane's next check.
func (e *Engine) applyTake(l *lane, leases *lua.TakeLeases, r lua.TakeReply, err error, at time.Time) {
	defer e.jobs.Done()
	l.pending = false
	if err != nil {
		e.redisError()
		e.warnRedis("take: take failed", "downstream", l.d.Name, "err", err)
		l.failed(at, e.cfg.IdlePoll)
		return
	}
	e.stats.recovered.Add(r.Recovered)
	e.stats.forwarded.Add(r.Forwarded)
	local := l.applyTake(r, at, e.cfg.IdlePoll)
	if r.Recovered+r.Forwarded > 0 && l.state == idle {
		l.wake(at)
	}
	if r.Reservation != nil && l.d.Reserved != nil {
		l.d.Reserved(*r.Reservation)
	}
	var prev chan struct{}
	issued := int64(0) // the units of the take's reservation before this task's
	for i, tt := range r.Tasks {
		j := newJob(e, l, tt, local(tt.Slot), len(r.Tasks)-1-i)
		if rs := r.Reservation; rs != nil && tt.Units > 0 {
			issued += tt.Units
			j.res = &Reservation{Slot: tt.Slot, Now: r.Now, Issued: rs.Issued + issued, Units: tt.Units}
			if leases != nil {
				j.res.Lease = leases.LeaseMember(tt.ID, tt.LeaseKey)
			}
		}
		j.prev, prev = prev, j.calling
		if len(l.held) == 0 {
			l.nextExtend = at.Add(e.cfg.Extend)
		}
		e.retaken(l, tt.ID)
		l.held[tt.ID] = j
		e.held.Store(tt.ID, j)
		l.unstarted.Add(1)
		e.stats.taken.Add(1)
		e.jobs.Add(1)
		if !e.stopping.Load() {
			go j.run()
		}
	}
	if e.stopping.Load() {
		e.requeueUnstarted(l) // a take that answered after shutdown began
	}
}

// requeueUnstarted claims l's jobs that have not started and gives their
// tasks back in one call, the earliest slot at the head of pending.
func (e *Engine) requeueUnstarted(l *lane) {
	var js []*job
	for _, j := range l.held {
		if j.state.CompareAndSwap(jobWaiting, jobClaimed) {
			l.unstarted.Add(-1)
			js = append(js, j)
		}
	}
	if len(js) == 0 {
		return
	}
	slices.SortFunc(js, func(a, b *job) int { return a.slot.Compare(b.slot) })
	ids := make([]string, len(js))
	for i, j := range js {
		ids[i] = j.tt.ID
	}
	op := func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		n, err := e.store.TakeRequeue(ctx, l.q, l.levels, ids...)
		cancel()
		e.post(func() {
			if err != nil {
				e.redisError()
				e.warnRedis("take: requeue at shutdown failed; the leases will expire", "downstream", l.d.Name, "err", err)
			}
			e.stats.requeued.Add(n)
			for _, j := range js {
				e.finished(l, j)
			}
		})
	}
	if !e.submit(op) {
		go op()
	}
}

// finished runs in the loop when job j of l is over. The task may be
// held by a newer job by then (retaken): that one stays.
func (e *Engine) finished(l *lane, j *job) {
	id := j.tt.ID
	if l.held[id] == j {
		delete(l.held, id)
	}
	e.held.CompareAndDelete(id, j)
	j.cut(nil)
	e.jobs.Done()
}

// retaken settles the job of l that still holds task id, if any, before a
// new take's job for it replaces it: the task went back to its queue and
// was taken again before the old job's end reached the loop (a job gives
// a task back and then returns), or while the old job was still waiting
// for its slot (its lease was lost and recovered). The new job holds the
// task now. An old job not yet started is dropped here (it must not call
// the task too, and the loop could no longer claim it at shutdown); one
// already started ends as it will, and its end leaves the new job be.
func (e *Engine) retaken(l *lane, id string) {
	old := l.held[id]
	if old == nil {
		return
	}
	e.stats.retaken.Add(1)
	if old.state.CompareAndSwap(jobWaiting, jobClaimed) {
		l.unstarted.Add(-1)
		old.cut(nil)
		e.jobs.Done()
	}
}

func (e *Engine) startProbes(ls []*lane) {
	ok := e.submit(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		pipe := e.cfg.Redis.Pipeline()
		for _, l := range ls {
			pipe.Exists(ctx, l.probe...) // a list exists while it holds a task
		}
		cmds, err := pipe.Exec(ctx)
		at := time.Now()
		e.post(func() { e.applyProbes(ls, cmds, err, at) })
	})
	if !ok {
		for _, l := range ls {
			l.pending = false
			l.next = time.Now().Add(10 * time.Millisecond)
		}
		return
	}
	e.stats.probes.Add(int64(len(ls)))
}
