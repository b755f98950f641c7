package sizing

import (
	"time"

	"github.com/shaper-io/shaper/internal/field"
	"github.com/shaper-io/shaper/limiters"
)

// Bounds of a downstream's calls: larger values are mistakes (a unit typed
// wrong), not configurations. Leases are one ZSET member each.
const (
	// MaxWorkers bounds an explicit worker budget per process.
	MaxWorkers = 10000
	// MaxConcurrency bounds Concurrency and KeyConcurrency.
	MaxConcurrency = 100000
	// MinLease and MaxLease bound a concurrency lease's life.
	MinLease = time.Second
	MaxLease = time.Hour
)

// CheckCalls is the one rule for a downstream's worker budget and its caps
// on calls in flight, in the config file and in Go: workers up to
// MaxWorkers, each cap up to MaxConcurrency, a key's cap within the
// downstream's, and a lease only under a cap, MinLease to MaxLease. Zero
// means the default (workers, lease) or no cap; nil when all hold.
func CheckCalls(workers, concurrency, keyConcurrency int, lease time.Duration) *field.Problem {
	switch {
	case workers < 0 || workers > MaxWorkers:
		return field.Errorf("workers", "Workers", "must be 1-%d, got %d", MaxWorkers, workers)
	case concurrency < 0 || concurrency > MaxConcurrency:
		return field.Errorf("concurrency", "Concurrency", "must be 0 (no cap) to %d, got %d", MaxConcurrency, concurrency)
	case keyConcurrency < 0 || keyConcurrency > MaxConcurrency:
		return field.Errorf("key_concurrency", "KeyConcurrency", "must be 0 (no cap) to %d, got %d", MaxConcurrency, keyConcurrency)
	case concurrency > 0 && keyConcurrency > concurrency:
		return field.Errorf("key_concurrency", "KeyConcurrency", "%d is above concurrency %d: one key could never reach it", keyConcurrency, concurrency)
	case lease != 0 && concurrency == 0 && keyConcurrency == 0:
		return field.Errorf("lease", "LeaseTime", "%s set without concurrency or key_concurrency (a lease only exists under a cap)", lease)
	case lease != 0 && (lease < MinLease || lease > MaxLease):
		return field.Errorf("lease", "LeaseTime", "must be %s to %s, got %s", MinLease, MaxLease, lease)
	}
	return nil
}

// CheckAdaptive is the one rule for an adaptive rate, in the config file
// and in Go: the floor at most the ceiling (the downstream's rate when
// the file leaves it out), a step a valid rate when set, the decrease in
// [0, 1) (zero: the default) and the interval not negative (zero: the
// default). Each rate's own validity and CheckRate are the caller's (the
// file quotes its rates as written). Named under the adaptive setting;
// nil when all hold.
func CheckAdaptive(floor, ceiling, step limiters.Limit, decrease float64, interval time.Duration) *field.Problem {
	var stepErr error
	if step.Rate != 0 {
		stepErr = ValidateRate(step)
	}
	switch {
	case floor.PerSec() > ceiling.PerSec():
		return field.Errorf("floor", "Floor", "%q is above the ceiling %q", floor.RateString(), ceiling.RateString())
	case stepErr != nil:
		return field.Errorf("step", "Step", "%v", stepErr)
	case !(decrease >= 0 && decrease < 1):
		return field.Errorf("decrease", "Decrease", "must be between 0 and 1 (exclusive), got %v", decrease)
	case interval < 0:
		return field.Errorf("interval", "Interval", "must be positive, got %s", interval)
	}
	return nil
}

// MaxBatchRows bounds a batch's rows.
const MaxBatchRows = 100000

// CheckBatch is the one rule for a batch, in the config file and in Go:
// 1 to MaxBatchRows rows, delays not negative (zero: the defaults). Named
// under the batch setting; nil when all hold.
func CheckBatch(maxRows int, maxDelay, grace time.Duration) *field.Problem {
	switch {
	case maxRows < 1 || maxRows > MaxBatchRows:
		return field.Errorf("max_rows", "MaxRows", "must be 1-%d, got %d", MaxBatchRows, maxRows)
	case maxDelay < 0:
		return field.Errorf("max_delay", "MaxDelay", "must be positive, got %s", maxDelay)
	case grace < 0:
		return field.Errorf("grace", "Grace", "must be at least 1s (asynq's minimum), got %s", grace)
	}
	return nil
}

// MaxMaxWait bounds a downstream's max wait (a config file's capacity /
// rate too): a task waiting longer for its slot belongs in the queue.
const MaxMaxWait = time.Hour

// CheckWaits is the one rule for how long a downstream's task may wait
// for its slot (maxWait, up to MaxMaxWait) and how long it may be held
// (maxHold, up to MaxInterval), in the config file and in Go; zero means
// the default. nil when both hold.
func CheckWaits(maxWait, maxHold time.Duration) *field.Problem {
	switch {
	case maxWait < 0 || maxWait > MaxMaxWait:
		return field.Errorf("max_wait", "MaxWait", "must be positive and at most %s, got %s (a task waiting longer belongs in the queue)", MaxMaxWait, maxWait)
	case maxHold < 0 || maxHold > MaxInterval:
		return field.Errorf("max_hold", "MaxHold", "must be more than 0 and at most %s, got %s", MaxInterval, maxHold)
	}
	return nil
}
