package replay

import (
	"container/heap"
	"fmt"
	"time"
)

// minHeap is a heap of T ordered by less.
type minHeap[T any] struct {
	items []T
	less  func(a, b T) bool
}

func (h *minHeap[T]) Len() int           { return len(h.items) }
func (h *minHeap[T]) Less(i, j int) bool { return h.less(h.items[i], h.items[j]) }
func (h *minHeap[T]) Swap(i, j int)      { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *minHeap[T]) Push(x any)         { h.items = append(h.items, x.(T)) }
func (h *minHeap[T]) Pop() any {
	n := len(h.items) - 1
	x := h.items[n]
	var zero T
	h.items[n] = zero
	h.items = h.items[:n]
	return x
}

func (h *minHeap[T]) push(x T) { heap.Push(h, x) }
func (h *minHeap[T]) pop() T   { return heap.Pop(h).(T) }
func (h *minHeap[T]) top() T   { return h.items[0] }

// reorder puts the log's arrivals in time order (ties in the log's
// order) with bounded memory: it holds an arrival until a line window
// later in time has been read, so a line may come up to window after a
// later one and still be replayed in its place. A line that comes after
// an arrival with a later ts was released is an error.
type reorder struct {
	window   time.Duration
	h        minHeap[Arrival]
	latest   time.Time // the latest ts read
	released Arrival   // the last arrival released
	any      bool      // whether one was
}

func newReorder(window time.Duration) *reorder {
	return &reorder{window: window, h: minHeap[Arrival]{less: arrivalBefore}}
}

func arrivalBefore(a, b Arrival) bool {
	if !a.TS.Equal(b.TS) {
		return a.TS.Before(b.TS)
	}
	return a.seq < b.seq
}

// add takes the next arrival of the log.
func (r *reorder) add(a Arrival) error {
	if r.any && a.TS.Before(r.released.TS) {
		return fmt.Errorf("replay: line %d: ts %s is before line %d's %s, which was already replayed: "+
			"the log is out of time order by more than the reorder window (%s); sort it by ts, or widen the window",
			a.Line, a.TS.UTC().Format(time.RFC3339Nano), r.released.Line, r.released.TS.UTC().Format(time.RFC3339Nano), r.window)
	}
	if a.TS.After(r.latest) {
		r.latest = a.TS
	}
	r.h.push(a)
	return nil
}

// next returns the earliest arrival held when no line still to come may
// precede it (all of them at the end of the log).
func (r *reorder) next(end bool) (Arrival, bool) {
	if r.h.Len() == 0 {
		return Arrival{}, false
	}
	if a := r.h.top(); !end && a.TS.After(r.latest.Add(-r.window)) {
		return Arrival{}, false
	}
	r.released, r.any = r.h.pop(), true
	return r.released, true
}

// readyBefore orders the tasks waiting for a slot as the old two-pass
// replay did: by ready time, then by arrival (time, then log order).
func readyBefore(a, b *Decision) bool {
	if !a.ready.Equal(b.ready) {
		return a.ready.Before(b.ready)
	}
	if !a.TS.Equal(b.TS) {
		return a.TS.Before(b.TS)
	}
	return a.seq < b.seq
}

// inOrder hands decisions on in the log's order, holding those that are
// done before an earlier line's.
type inOrder struct {
	h    minHeap[*Decision]
	next int
	emit func(*Decision) error
}

func newInOrder(emit func(*Decision) error) *inOrder {
	return &inOrder{h: minHeap[*Decision]{less: func(a, b *Decision) bool { return a.seq < b.seq }}, emit: emit}
}

func (o *inOrder) done(d *Decision) error {
	o.h.push(d)
	for o.h.Len() > 0 && o.h.top().seq == o.next {
		if err := o.emit(o.h.pop()); err != nil {
			return err
		}
		o.next++
	}
	return nil
}
