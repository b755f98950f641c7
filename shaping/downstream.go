package shaping

import (
	"fmt"
	"time"
)

// DefaultMaxHold is the longest one answer holds a downstream unless its
// configuration says otherwise: an hour, so that one buggy header cannot
// freeze a stream for a day.
const DefaultMaxHold = time.Hour

// prepare checks ds and fills in its defaults (MaxWait, Workers,
// MaxCost); its errors name the downstream and the field.
func (ds *Downstream) prepare() error {
	if !dsName.MatchString(ds.Name) {
		return fmt.Errorf("shaping: downstream name must be 1-64 of [A-Za-z0-9_.-], got %q", ds.Name)
	}
	if err := validateRate(ds.Rate); err != nil {
		return fmt.Errorf("shaping: downstream %q: %w", ds.Name, err)
	}
	if ds.MaxWait < 0 || ds.Workers < 0 || ds.Burst < 0 || ds.MaxCost < 0 {
		return fmt.Errorf("shaping: downstream %q: MaxWait, Workers, Burst and MaxCost must not be negative", ds.Name)
	}
	if ds.Concurrency < 0 || ds.KeyConcurrency < 0 || ds.LeaseTime < 0 || (ds.LeaseTime > 0 && ds.LeaseTime < time.Second) {
		return fmt.Errorf("shaping: downstream %q: Concurrency and KeyConcurrency must not be negative and LeaseTime must be 0 or at least 1s (got %d, %d, %s)",
			ds.Name, ds.Concurrency, ds.KeyConcurrency, ds.LeaseTime)
	}
	if a := ds.Adaptive; a != nil {
		if err := validateRate(a.Floor); err != nil {
			return fmt.Errorf("shaping: downstream %q: adaptive floor: %w", ds.Name, err)
		}
		if err := validateRate(a.Ceiling); err != nil {
			return fmt.Errorf("shaping: downstream %q: adaptive ceiling: %w", ds.Name, err)
		}
		if a.Floor.PerSec() > a.Ceiling.PerSec() {
			return fmt.Errorf("shaping: downstream %q: adaptive floor %s is above the ceiling %s", ds.Name, a.Floor.RateString(), a.Ceiling.RateString())
		}
	}
	if b := ds.Breaker; b != nil {
		if err := validateBreaker(b, ds.Rate); err != nil {
			return fmt.Errorf("shaping: downstream %q: %w", ds.Name, err)
		}
	}
	if b := ds.Batch; b != nil && (b.MaxRows < 1 || b.MaxDelay < 0 || b.Grace < 0) {
		return fmt.Errorf("shaping: downstream %q: Batch.MaxRows must be at least 1 and its delays not negative", ds.Name)
	}
	if f := ds.Fairness; f != nil {
		if err := f.validate(); err != nil {
			return fmt.Errorf("shaping: downstream %q: %w", ds.Name, err)
		}
		if ds.Batch != nil {
			return fmt.Errorf("shaping: downstream %q: Fairness and Batch cannot be combined", ds.Name)
		}
	}
	if ds.MaxHold < 0 || ds.MaxHold > MaxInterval {
		return fmt.Errorf("shaping: downstream %q: MaxHold must be in (0, %s], got %s", ds.Name, MaxInterval, ds.MaxHold)
	}
	if ds.MaxHold == 0 {
		ds.MaxHold = DefaultMaxHold
	}
	if ds.MaxWait == 0 {
		ds.MaxWait = time.Second
	}
	if ds.Workers == 0 {
		ds.Workers = DefaultWorkers(ds.Rate, ds.MaxWait)
	}
	if ds.MaxCost == 0 {
		ds.MaxCost = DefaultMaxCost(ds.Rate, ds.MaxWait, ds.Burst)
		if m := minQuota(ds.Quotas); m > 0 {
			ds.MaxCost = min(ds.MaxCost, m)
		}
	}
	if err := validateQuotas(ds.Quotas, ds.maxReleaseCost()); err != nil {
		return fmt.Errorf("shaping: downstream %q: %w", ds.Name, err)
	}
	if iv := ds.Rate.Interval(ds.maxReleaseCost()); iv > MaxInterval {
		return fmt.Errorf("shaping: downstream %q: MaxCost %d at %s is %s of the bucket, more than %s", ds.Name, ds.MaxCost, ds.Rate.RateString(), iv, MaxInterval)
	}
	return nil
}
