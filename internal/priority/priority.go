// Package priority is the rule for a task's priority: an integer from 1
// (taken first) to 5 (taken last), 3 by default, Temporal's convention.
// Within a downstream, a waiting task of a higher priority (a lower
// number) is always taken before one of a lower priority; tasks of one
// priority are taken first in, first out. The producer (queue) records it,
// the take engine (shaping/take) serves it; both use this package.
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
