package shaping

import (
	"cmp"
	"fmt"
	"time"

	"github.com/shaper-io/shaper/internal/priority"
	"github.com/shaper-io/shaper/internal/sizing"
	"github.com/shaper-io/shaper/limiters"
)

// DefaultMaxHold is the longest one answer holds a downstream unless its
// configuration says otherwise: an hour, so that one buggy header cannot
// freeze a stream for a day.
const DefaultMaxHold = sizing.DefaultMaxHold

// prepare checks ds and fills in its defaults (MaxWait, Workers,
// MaxCost); its errors name the downstream and the field.
func (ds *Downstream) prepare() error {
	if !dsName.MatchString(ds.Name) {
		return fmt.Errorf("shaping: downstream name must be 1-64 of [A-Za-z0-9_.-], got %q", ds.Name)
	}
	if err := sizing.ValidateRate(ds.Rate); err != nil {
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
		if err := sizing.ValidateRate(a.Floor); err != nil {
			return fmt.Errorf("shaping: downstream %q: adaptive floor: %w", ds.Name, err)
		}
		if err := sizing.ValidateRate(a.Ceiling); err != nil {
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
		if err := f.Validate(); err != nil {
			return fmt.Errorf("shaping: downstream %q: %w", ds.Name, err)
		}
		if ds.Batch != nil {
			return fmt.Errorf("shaping: downstream %q: Fairness and Batch cannot be combined", ds.Name)
		}
	}
	if pr := ds.Priority; pr != nil {
		if err := priority.Validate(pr.Default); err != nil {
			return fmt.Errorf("shaping: downstream %q: Priority.Default: %w", ds.Name, err)
		}
		if err := pr.Weights.Validate(); err != nil {
			return fmt.Errorf("shaping: downstream %q: Priority.Weights: %w", ds.Name, err)
		}
		if ds.Batch != nil {
			return fmt.Errorf("shaping: downstream %q: Priority and Batch cannot be combined (a batch is served by asynq's server, which knows no priority)", ds.Name)
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
		ds.MaxCost = ds.defaultMaxCost()
	}
	if err := validateQuotas(ds.Quotas, ds.maxReleaseCost()); err != nil {
		return fmt.Errorf("shaping: downstream %q: %w", ds.Name, err)
	}
	return ds.checkRates()
}

// defaultMaxCost is MaxCost when it is zero: DefaultMaxCost at the rate,
// within the smallest quota and what a spread quota paces within
// MaxInterval (sizing.SpreadUnits).
func (ds *Downstream) defaultMaxCost() int64 {
	m := DefaultMaxCost(ds.Rate, cmp.Or(ds.MaxWait, time.Second), ds.Burst)
	if q := minQuota(ds.Quotas); q > 0 {
		m = min(m, q)
	}
	for _, q := range ds.Quotas {
		if q.Spread && q.Per > 0 {
			m = min(m, sizing.SpreadUnits(q.Limit, q.Per))
		}
	}
	return m
}

// ErrRateTooSlow is wrapped by Downstream.CheckRate's error (and so by
// Dispatcher.Add's and Control.SetRate's) for a rate at which the
// downstream's largest release would hold it for longer than MaxInterval.
var ErrRateTooSlow = sizing.ErrRateTooSlow

// SlowRateError is the error CheckRate wraps for such a rate: the rate,
// the largest release's cost and how long it would hold the downstream.
type SlowRateError = sizing.SlowRateError

// CheckRate reports whether ds may run at l: l must be a valid rate (Rate
// and Period; its Burst is not read), and ds's largest release (MaxCost,
// or MaxCost × Batch.MaxRows for a batch) must fit in one reservation at
// it, MaxInterval; at a slower rate the bucket refuses every such task
// (limiters.ErrCostExceedsCapacity) and it is archived instead of waiting.
// A zero MaxCost counts as the default Dispatcher.Add fills in.
//
// It is the one rule for every rate a downstream runs at: Dispatcher.Add
// applies it to Rate, the Schedule's rates and the Adaptive floor and
// ceiling; Control.SetRate to an override of a downstream the dispatcher
// serves; the control loop ignores an override in Redis that fails it;
// internal/config applies the same rule (sizing.CheckRate) to the file.
func (ds Downstream) CheckRate(l limiters.Limit) error {
	if err := ds.checkRate(l); err != nil {
		return fmt.Errorf("shaping: downstream %q: %w", ds.Name, err)
	}
	return nil
}

// CheckKeyRate reports why l cannot be a key's ceiling on ds (a runtime
// one: shaper ctl key RATE): an invalid rate, one above ds's configured
// rate (it would never bind), or one slower than a task per MaxInterval.
// Errors wrap limiters.ErrInvalidLimit. internal/config applies the same
// rule to fairness.key_rate and key_rates in the file.
func (ds Downstream) CheckKeyRate(l limiters.Limit) error {
	if err := sizing.ValidateRate(l); err != nil {
		return fmt.Errorf("shaping: downstream %q: key rate: %w", ds.Name, err)
	}
	if l.PerSec() > ds.Rate.PerSec() {
		return fmt.Errorf("shaping: downstream %q: %w: key rate %s is above the downstream's rate %s: it would never bind",
			ds.Name, limiters.ErrInvalidLimit, l.RateString(), ds.Rate.RateString())
	}
	if sizing.CheckRate(l, 1) != nil {
		return fmt.Errorf("shaping: downstream %q: %w: key rate %s is slower than one task per key in %s",
			ds.Name, limiters.ErrInvalidLimit, l.RateString(), sizing.MaxInterval)
	}
	return nil
}

func (ds Downstream) checkRate(l limiters.Limit) error {
	if err := sizing.ValidateRate(l); err != nil {
		return err
	}
	if ds.MaxCost == 0 {
		ds.MaxCost = ds.defaultMaxCost()
	}
	return sizing.CheckRate(l, ds.maxReleaseCost())
}

// checkRates applies CheckRate to every rate ds is configured to run at.
func (ds *Downstream) checkRates() error {
	check := func(what string, l limiters.Limit) error {
		if err := ds.checkRate(l); err != nil {
			return fmt.Errorf("shaping: downstream %q: %s%w", ds.Name, what, err)
		}
		return nil
	}
	if err := check("", ds.Rate); err != nil {
		return err
	}
	for _, c := range ds.Schedule {
		if err := check(fmt.Sprintf("schedule %q: ", c.Spec), c.Rate); err != nil {
			return err
		}
	}
	if a := ds.Adaptive; a != nil {
		if err := check("adaptive floor: ", a.Floor); err != nil {
			return err
		}
		return check("adaptive ceiling: ", a.Ceiling)
	}
	return nil
}

// Priority is a downstream's priority setting (Downstream.Priority).
type Priority struct {
	// Default is the priority of a task that names none: 1 to 5; 0
	// means 3.
	Default int
	// Weights, when set, serve the levels by weight instead of strictly
	// in order (priority.Weights); the zero value is strict priority.
	Weights priority.Weights
}
