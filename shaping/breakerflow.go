package shaping

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/shaper-io/shaper/internal/breakerspec"
	"github.com/shaper-io/shaper/internal/lua"
)

// brkGate is the breaker's answer to the lane: release (the slots carry
// seq; probe: one slot, a half-open probe), or wait until wait passes or
// the breaker changes.
type brkGate struct {
	ok      bool
	probe   bool
	seq     uint64
	wait    time.Duration
	changed <-chan struct{}
}

// gate is asked by the lane before each reservation. Closed, it answers
// from the mirror without Redis; open, it waits out the cool-down on the
// local clock; then it asks the script, which turns the breaker half-open
// and grants probes at the probe pace across every process.
func (b *breaker) gate() brkGate {
	b.mu.Lock()
	mode, until, seq, ch := b.mode, b.until, b.seq, b.changed
	b.mu.Unlock()
	if mode == BreakerClosed {
		return brkGate{ok: true, seq: seq}
	}
	clk := b.env.clock
	if mode == BreakerOpen {
		end := time.UnixMicro(until).Add(b.env.offset.get()) // the cool-down's end on the local clock
		if left := end.Sub(clk.Now()); left > 0 {
			return brkGate{wait: left + brkJitter(), changed: ch}
		}
	}
	rep, err := b.call(func(ctx context.Context, a lua.BreakerArgs) (lua.BreakerReply, error) {
		return b.env.store.ProbeBreaker(ctx, b.key, a)
	})
	if err != nil {
		// no release without the breaker's leave: ask again shortly
		return brkGate{wait: brkFast + brkJitter(), changed: ch}
	}
	recv := clk.Now()
	b.env.offset.observe(recv.Sub(time.UnixMicro(rep.Now)), recv)
	b.applyReply(rep)
	b.mu.Lock()
	seq, ch = b.seq, b.changed
	b.mu.Unlock()
	if rep.Granted {
		return brkGate{ok: true, probe: rep.State == lua.BreakerHalfOpen, seq: seq}
	}
	return brkGate{wait: time.Duration(rep.Wait)*time.Microsecond + brkJitter(), changed: ch}
}

// brkJitter keeps the lanes of several processes from asking at the same
// instant when a cool-down or a probe slot ends.
func brkJitter() time.Duration { return time.Duration(rand.Int64N(int64(5 * time.Millisecond))) }

// call runs one breaker script call with the dispatcher's timeout,
// recording its latency and logging a failure at most every 10s.
func (b *breaker) call(f func(context.Context, lua.BreakerArgs) (lua.BreakerReply, error)) (lua.BreakerReply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), b.env.timeout)
	defer cancel()
	start := time.Now()
	rep, err := f(ctx, b.args())
	b.env.m.ObserveScript("breaker", time.Since(start), err)
	if err != nil {
		b.mu.Lock()
		quiet := time.Since(b.lastLog) < 10*time.Second
		if !quiet {
			b.lastLog = time.Now()
		}
		b.mu.Unlock()
		if !quiet {
			b.env.log.Warn("shaping: circuit breaker call failed", "downstream", b.env.name, "err", err)
		}
	}
	return rep, err
}

// record counts a release's outcome and reports whether its task is held
// by an outage: its call failed the way an outage does and the breaker
// has moved (opened) since the release, now or within verdictWait. The
// task then waits in place for a slot, which the breaker gives once it
// closes: the failure is the outage's, not the task's, so it consumes no
// attempt and archives nothing.
func (b *breaker) record(ctx context.Context, tok brkToken, outage bool) bool {
	b.mu.Lock()
	// Outcomes of releases made while closed count only while the breaker
	// still is (the script would ignore them too).
	if tok.probe || b.mode == BreakerClosed {
		k := brkToken{probe: tok.probe, since: tok.since}
		if !tok.probe {
			k.since = 0
		}
		c := b.pending[k]
		if c == nil {
			c = &brkCount{}
			b.pending[k] = c
		}
		c.calls++
		if outage {
			c.errs++
		}
		b.urgent = b.urgent || outage || tok.probe
	}
	b.mu.Unlock()
	select {
	case b.kick <- struct{}{}:
	default:
	}
	return outage && b.holds(ctx, tok)
}

// holds waits for the verdict on a failed call released at tok: true once
// the breaker moved since (or when ctx ends or the dispatcher stops: the
// task goes back to its queue without an attempt); false when verdictWait
// passed with the breaker as it was.
func (b *breaker) holds(ctx context.Context, tok brkToken) bool {
	t := b.env.clock.NewTimer(b.verdictWait())
	defer t.Stop()
	for {
		b.mu.Lock()
		moved, ch := b.seq != tok.seq, b.changed
		b.mu.Unlock()
		if moved {
			return true
		}
		select {
		case <-ch:
		case <-t.C():
			return false
		case <-ctx.Done():
			return true
		case <-b.env.stopping:
			return true
		}
	}
}

// verdictWait is how long a failed call's task waits for the breaker to
// open: the time MinCalls calls take at the rate in force (at most the
// window), plus the batching of reports and two control ticks for the news
// to reach this process. It bounds the tasks a partial failure holds to
// about the failed share of MinCalls.
func (b *breaker) verdictWait() time.Duration {
	calls := b.env.rate.Load().Interval(int64(b.spec.MinCalls))
	return min(calls, b.spec.Window) + brkFast + 2*b.env.tick
}

// run reports the outcomes in batches until the dispatcher stops: within
// brkFast of an urgent one (an error, a probe's), else within a tenth of
// the window (at most brkSlow).
func (b *breaker) run() {
	clk, stop := b.env.clock, b.env.stopping
	slow := min(max(b.spec.Window/breakerspec.Buckets, brkFast), brkSlow)
	for {
		select {
		case <-b.kick:
		case <-stop:
			b.flush()
			return
		}
		wait := slow
		if b.isUrgent() {
			wait = brkFast
		}
		t := clk.NewTimer(wait)
	batch:
		for {
			select {
			case <-t.C():
				break batch
			case <-b.kick:
				if wait > brkFast && b.isUrgent() {
					t.Stop()
					wait = brkFast
					t = clk.NewTimer(wait)
				}
			case <-stop:
				t.Stop()
				break batch
			}
		}
		b.flush()
	}
}

func (b *breaker) isUrgent() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.urgent
}

// flush reports the pending outcomes: one script call per state they were
// released in (nearly always one). A failed report is dropped: the
// breaker's window is a sample, and shaping still fails closed on the
// bucket.
func (b *breaker) flush() {
	b.mu.Lock()
	batch := b.pending
	if len(batch) == 0 {
		// Nothing to report; ranging over b.pending outside the lock would
		// race with record.
		b.mu.Unlock()
		return
	}
	b.pending, b.urgent = map[brkToken]*brkCount{}, false
	b.mu.Unlock()
	for k, c := range batch {
		rep, err := b.call(func(ctx context.Context, a lua.BreakerArgs) (lua.BreakerReply, error) {
			return b.env.store.ReportBreaker(ctx, b.key, a, lua.BreakerReport{Probe: k.probe, Since: k.since, Calls: c.calls, Errors: c.errs})
		})
		if err == nil {
			b.applyReply(rep)
		}
	}
}
