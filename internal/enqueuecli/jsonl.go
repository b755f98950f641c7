package enqueuecli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/shaper-io/shaper/internal/taskspec"
	"github.com/shaper-io/shaper/queue"
)

type job struct {
	line int
	raw  []byte
	spec taskspec.Spec
	task queue.Task
}

type lineMsg struct {
	no      int
	data    []byte
	tooLong bool
	off     int64
	err     error
}

// feed is the state of one JSON Lines run: the main loop reads lines and
// hands jobs to the workers until the input ends, the run is interrupted,
// or a worker stops it.
type feed struct {
	jobs     chan job
	stopped  chan struct{}
	stopOnce sync.Once
	workers  sync.WaitGroup
	last     int  // the last line read
	eof      bool // the input's end was reached
}

func (f *feed) stop() { f.stopOnce.Do(func() { close(f.stopped) }) }

func (r *runner) runLines(ctx context.Context) {
	if r.inFile == nil && r.std.StdinTTY && !r.o.quiet {
		r.con.line("enqueue: reading JSON Lines tasks from the terminal; end with Ctrl-D")
	}
	if r.o.progress == "always" || r.o.progress == "auto" && r.std.StderrTTY {
		r.con.startProgress(r.progressStats, 100*time.Millisecond)
		defer r.con.stopProgress()
	}
	r.led = newLedger()
	readerDone := make(chan struct{})
	defer close(readerDone)
	lines := r.readLines(readerDone)
	f := &feed{jobs: make(chan job), stopped: make(chan struct{})}
	r.startWorkers(ctx, f)
	r.dispatch(ctx, f, lines)
	close(f.jobs)
	f.workers.Wait()
	if ctx.Err() != nil {
		r.count(func(s *Summary) { s.Interrupted = true })
	}
	rep := r.led.report()
	r.count(func(s *Summary) { s.UncertainLines = rep.uncertain })
	if (r.redisDown || ctx.Err() != nil) && !(f.eof && r.led.complete(f.last)) {
		r.reportStop(rep)
	}
}

// readLines reads the input apart, so that an interrupt does not wait for
// input.
func (r *runner) readLines(done <-chan struct{}) <-chan lineMsg {
	lines := make(chan lineMsg, 64)
	go func() {
		defer close(lines)
		lr := newLineReader(r.in, r.maxLine)
		for {
			data, no, tooLong, err := lr.next()
			if errors.Is(err, io.EOF) {
				return
			}
			select {
			case lines <- lineMsg{no: no, data: data, tooLong: tooLong, off: lr.off, err: err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return lines
}

// startWorkers starts --concurrency workers. Each records its job's
// outcome in the ledger; one that meets a Redis that is gone stops the run.
func (r *runner) startWorkers(ctx context.Context, f *feed) {
	for range r.o.concurrency {
		f.workers.Add(1)
		go func() {
			defer f.workers.Done()
			for j := range f.jobs {
				select {
				case <-f.stopped: // a job handed over as the run stopped
					r.count(func(s *Summary) { s.Tasks-- })
					r.led.record(j.line, open)
					continue
				default:
				}
				o, ok := r.enqueue(context.WithoutCancel(ctx), j)
				r.led.record(j.line, o)
				if !ok {
					f.stop()
				}
			}
		}()
	}
}

// dispatch reads lines, checks them, and hands each good one to a worker,
// at the --rate pace, until the input ends or the run stops.
func (r *runner) dispatch(ctx context.Context, f *feed, lines <-chan lineMsg) {
	pace := newPacer(r.o.rate)
	for {
		var m lineMsg
		var ok bool
		select {
		case <-ctx.Done():
			return
		case <-f.stopped:
			return
		case m, ok = <-lines:
		}
		if !ok {
			f.eof = true
			return
		}
		if m.err != nil {
			r.mu.Lock()
			r.sum.Error = "reading " + r.source + ": " + oneLine(m.err.Error())
			r.sum.Invalid++
			r.mu.Unlock()
			r.con.line("enqueue: %s: %s", r.source, oneLine(m.err.Error()))
			return
		}
		r.mu.Lock()
		r.read = m.off
		r.mu.Unlock()
		f.last = m.no
		spec, good := r.checkLine(m)
		if !good {
			r.led.record(m.no, handled)
			continue
		}
		if err := pace.wait(ctx, f.stopped); err != nil {
			r.count(func(s *Summary) { s.Tasks-- })
			return
		}
		// "in" counts from the enqueue, not from the read.
		task, err := r.check(spec, false)
		if err != nil {
			r.invalid(r.source, m.no, taskspec.Reason(err))
			r.led.record(m.no, handled)
			continue
		}
		select {
		case <-f.stopped:
			r.count(func(s *Summary) { s.Tasks-- })
			return
		default:
		}
		select {
		case f.jobs <- job{line: m.no, raw: m.data, spec: spec, task: task}:
		case <-f.stopped:
			r.count(func(s *Summary) { s.Tasks-- })
			return
		case <-ctx.Done():
			r.count(func(s *Summary) { s.Tasks-- })
			return
		}
	}
}

// checkLine parses and checks one line; false means there is nothing to
// enqueue for it: blank, bad (reported), or a dry run.
func (r *runner) checkLine(m lineMsg) (taskspec.Spec, bool) {
	if m.tooLong {
		r.count(func(s *Summary) { s.Tasks++ })
		r.invalid(r.source, m.no, fmt.Sprintf("the line is longer than %d bytes", r.maxLine))
		return taskspec.Spec{}, false
	}
	if len(strings.TrimSpace(string(m.data))) == 0 {
		return taskspec.Spec{}, false
	}
	r.count(func(s *Summary) { s.Tasks++ })
	spec, err := taskspec.Parse(m.data)
	if err == nil {
		spec = spec.Merge(r.o.defaults)
		_, err = r.check(spec, false)
	}
	if err != nil {
		r.invalid(r.source, m.no, taskspec.Reason(err))
		return taskspec.Spec{}, false
	}
	return spec, !r.o.dryRun
}

// reportStop records and prints where a run that stopped early stands: one
// line, with the same numbers as the JSON summary.
func (r *runner) reportStop(rep stopReport) {
	r.mu.Lock()
	r.sum.StoppedAtLine, r.sum.EnqueuedAfterStop = rep.line, rep.enqueuedAfter
	why, cause, down := r.sum.Error, r.stopErr, r.redisDown
	r.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "stopped at line %d of %s", rep.line, r.source)
	if down {
		fmt.Fprintf(&b, ": %s: %s", why, cause)
	} else {
		b.WriteString(": interrupted")
	}
	fmt.Fprintf(&b, "; every line before %d was handled", rep.line)
	if len(rep.uncertain) > 0 {
		fmt.Fprintf(&b, "; sent but outcome unknown, so maybe stored: line %s", lineList(rep.uncertain, 20))
	}
	if len(rep.enqueuedAfter) > 0 {
		fmt.Fprintf(&b, "; enqueued although after line %d: line %s", rep.line, lineList(rep.enqueuedAfter, 20))
	}
	r.con.line("enqueue: %s", b.String())
}
