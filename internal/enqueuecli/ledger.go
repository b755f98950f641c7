package enqueuecli

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/queue"
)

// outcome is what became of one input line.
type outcome int

const (
	// handled: known either way and not to be sent again: rejected,
	// invalid, a duplicate, collapsed into a waiting task, a blank line,
	// or refused by a Redis that answered.
	handled outcome = iota + 1
	// enqueued: handled, and the task is in Redis.
	enqueued
	// open: not enqueued, to be sent again: it failed as Redis went away
	// before the enqueue was sent, or the run stopped before its turn.
	open
	// unknown: sent to Redis, and the enqueue failed without an answer
	// that says it was refused (a network error, a timeout): it may or
	// may not be stored.
	unknown
)

// ledger records each line's outcome, in whatever order the workers
// finish, so that a run that stops can say where to resume. Like a
// receiver's acknowledgement it keeps the longest prefix of lines that are
// all handled, and the outcomes past it.
type ledger struct {
	mu        sync.Mutex
	done      int // lines 1..done are all handled (or enqueued)
	ahead     map[int]outcome
	uncertain []int
}

func newLedger() *ledger { return &ledger{ahead: map[int]outcome{}} }

func (l *ledger) record(line int, o outcome) {
	if line <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if o == unknown {
		l.uncertain = append(l.uncertain, line)
	}
	if line != l.done+1 || (o != handled && o != enqueued) {
		l.ahead[line] = o
		return
	}
	l.done++
	for {
		next, ok := l.ahead[l.done+1]
		if !ok || (next != handled && next != enqueued) {
			return
		}
		delete(l.ahead, l.done+1)
		l.done++
	}
}

// stopReport is where a stopped run stands.
type stopReport struct {
	// line is the first line not known to be handled: every line before it
	// is; a run resumed from it misses nothing.
	line int
	// uncertain lines were sent and failed without a clear answer: each
	// may be stored.
	uncertain []int
	// enqueuedAfter lines come after line and are stored: a run resumed
	// from line enqueues them again (unless they carry unique keys).
	enqueuedAfter []int
}

func (l *ledger) report() stopReport {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := stopReport{line: l.done + 1, uncertain: slices.Clone(l.uncertain)}
	for line, o := range l.ahead {
		if o == enqueued {
			r.enqueuedAfter = append(r.enqueuedAfter, line)
		}
	}
	slices.Sort(r.uncertain)
	slices.Sort(r.enqueuedAfter)
	return r
}

// complete reports whether every line up to last is handled.
func (l *ledger) complete(last int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done >= last && len(l.ahead) == 0
}

// mayBeStored reports whether err leaves a task's fate unknown: the
// enqueue was sent to Redis (queue.ErrEnqueue) and failed without an
// answer that says it was refused. That covers more than timeouts: the
// client retries a broken call once, so even "connection refused" may
// follow an attempt that was written and executed, and asynq reports its
// script's errors as text, so the cause cannot be told apart reliably.
func mayBeStored(err error) bool {
	var reply redis.Error
	return errors.Is(err, queue.ErrEnqueue) && !errors.As(err, &reply)
}

// lineList writes sorted line numbers with runs as ranges: "3, 7-9, 12".
// Past max runs it says how many lines are left out.
func lineList(lines []int, max int) string {
	var b strings.Builder
	n := 0
	for i := 0; i < len(lines); {
		j := i
		for j+1 < len(lines) && lines[j+1] == lines[j]+1 {
			j++
		}
		if n == max {
			fmt.Fprintf(&b, " and %d more lines (--json lists them all)", len(lines)-i)
			break
		}
		if n > 0 {
			b.WriteString(", ")
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", lines[i], lines[j])
		} else {
			fmt.Fprintf(&b, "%d", lines[i])
		}
		n++
		i = j + 1
	}
	return b.String()
}
