package sizing

import (
	"time"

	"github.com/shaper-io/shaper/internal/field"
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
		return field.Errorf("lease", "LeaseTime", "must be 1s to 1h, got %s", lease) // MinLease, MaxLease
	}
	return nil
}
