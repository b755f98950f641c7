// Package priority is the rule for a task's priority: an integer from 1
// (taken first) to 5 (taken last), 3 by default, Temporal's convention.
// Within a downstream, a waiting task of a higher priority (a lower
// number) is always taken before one of a lower priority, unless the
// downstream has Weights; tasks of one priority are taken first in, first
// out. The producer (queue) records it, the take engine (shaping/take)
// serves it; both use this package.
package priority

import "fmt"

const (
	// First is the highest priority.
	First = 1
	// Last is the lowest priority.
	Last = 5
	// Default is the priority of a task that names none; such tasks wait
	// in asynq's pending list, the others in lists of their own.
	Default = 3
	// Field is the task hash field (asynq's task HASH) that records a
	// priority other than Default, so a retried, recovered or requeued
	// task returns to its priority.
	Field = "shaper_priority"
)

// Levels are the priorities with lists of their own, in the order a take
// serves them around asynq's pending list (which holds Default): 1 and 2
// before it, 4 and 5 after.
var Levels = [4]int{1, 2, 4, 5}

// Validate reports whether p is a priority; 0 means "the downstream's
// default" and is valid too.
func Validate(p int) error {
	if p != 0 && (p < First || p > Last) {
		return fmt.Errorf("priority must be an integer from %d (first) to %d (last), got %d", First, Last, p)
	}
	return nil
}

// Weighted priority. A downstream with Weights serves its levels by
// weight instead of strictly in order (start-time fair queueing with unit
// costs, in take.lua): among the levels that have tasks waiting, each gets
// takes in proportion to its weight, and a level with none gives its
// turns to the others. Over any stretch in which levels i and j both have
// tasks waiting, n_i/w_i and n_j/w_j differ by at most 1/w_i + 1/w_j; a
// task at the head of level p waits behind at most floor(w_j/w_p) + 1
// takes of each other level j with tasks waiting. A level that had none
// rejoins at the current turn, with no credit for its idle spell.
const (
	// DefaultWeight is the weight of a level that Weights does not name.
	DefaultWeight = 1
	// MaxWeight is the largest weight of one level.
	MaxWeight = 1000
)

// Weights are the weights of weighted priority: Weights[p-1] is level
// p's. The zero value is strict priority (no weights).
type Weights [Last]int

// CheckWeight reports whether level p may have weight w: p a priority
// from First to Last, w an integer from 1 to MaxWeight.
func CheckWeight(p, w int) error {
	if p < First || p > Last {
		return fmt.Errorf("level must be a priority from %d (first) to %d (last), got %d", First, Last, p)
	}
	if w < 1 || w > MaxWeight {
		return fmt.Errorf("weight must be an integer from 1 to %d, got %d", MaxWeight, w)
	}
	return nil
}

// WeightsFrom returns the Weights of m (level -> weight); a level m does
// not name has DefaultWeight. An empty m is strict priority (zero
// Weights).
func WeightsFrom(m map[int]int) (Weights, error) {
	var w Weights
	if len(m) == 0 {
		return w, nil
	}
	for p := First; p <= Last; p++ {
		w[p-1] = DefaultWeight
	}
	for p, n := range m {
		if err := CheckWeight(p, n); err != nil {
			return Weights{}, fmt.Errorf("priority weights: %w", err)
		}
		w[p-1] = n
	}
	return w, nil
}

// Strict reports whether w is strict priority (the zero value).
func (w Weights) Strict() bool { return w == Weights{} }

// Validate reports whether w is strict (zero) or every level's weight is
// from 1 to MaxWeight.
func (w Weights) Validate() error {
	if w.Strict() {
		return nil
	}
	for i, n := range w {
		if err := CheckWeight(i+1, n); err != nil {
			return fmt.Errorf("priority weights: %w", err)
		}
	}
	return nil
}

// String is "strict" or the weights by level, "1:8 2:4 3:2 4:1 5:1".
func (w Weights) String() string {
	if w.Strict() {
		return "strict"
	}
	s := ""
	for i, n := range w {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%d:%d", i+1, n)
	}
	return s
}
