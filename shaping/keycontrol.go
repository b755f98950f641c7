package shaping

import (
	"context"
	"fmt"

	"github.com/shaper-io/shaper/internal/fairindex"
	"github.com/shaper-io/shaper/internal/sizing"
	"github.com/shaper-io/shaper/limiters"
)

// The key controls of a fair downstream: an operator's rate, weight or
// pause for one admission key, in every process within a
// Config.ControlInterval, kept in Redis (for StateTTL after the last
// change). A key's rate and weight replace the configuration's
// (fairness.key_rates, key_rate, weights) at the next take and for its
// tasks parked from then on; a pause keeps its waiting tasks out of fair
// order (those already taken, at most the take's look-ahead, still go)
// while the other keys keep the full rate.

// SetKeyRate caps key of fair downstream ds at l in every process; the
// zero Limit removes the cap (back to the configuration's). The Control of
// a Dispatcher refuses, for a downstream it serves, a rate that fails
// Downstream.CheckKeyRate; a Control from NewControl checks only that l is
// a valid rate, so check with the downstream's CheckKeyRate first. Either
// way the control loop ignores a key rate that fails it.
func (c *Control) SetKeyRate(ctx context.Context, ds, key string, l limiters.Limit) error {
	if !l.IsZero() {
		if err := sizing.ValidateRate(l); err != nil {
			return err
		}
		if c.served != nil {
			if d, ok := c.served(ds); ok {
				if err := d.CheckKeyRate(l); err != nil {
					return err
				}
			}
		}
	}
	if err := c.st.SetKeyRate(ctx, ds, key, l); err != nil {
		return err
	}
	// its tasks the old ceiling spaced out go by the new one
	return c.unhold(ctx, ds, key)
}

// SetKeyWeight sets key's fair-share weight on ds in every process, in
// (0, fairindex.MaxWeight]; 0 removes it (back to the configuration's).
func (c *Control) SetKeyWeight(ctx context.Context, ds, key string, w float64) error {
	if err := CheckKeyWeight(w); err != nil {
		return err
	}
	return c.st.SetKeyWeight(ctx, ds, key, w)
}

// CheckKeyWeight reports a key's runtime weight out of (0,
// fairindex.MaxWeight], the file's range for weights; 0 passes (it
// removes the runtime weight). The error wraps limiters.ErrInvalidLimit.
func CheckKeyWeight(w float64) error {
	if w < 0 || w > fairindex.MaxWeight || w != w {
		return fmt.Errorf("%w: weight must be in (0, %g] (0 removes it), got %g", limiters.ErrInvalidLimit, float64(fairindex.MaxWeight), w)
	}
	return nil
}

// PauseKey holds key's tasks on fair downstream ds in every process: none
// is taken until ResumeKey or ClearKey; other keys keep
// the rate. Nothing is dropped.
func (c *Control) PauseKey(ctx context.Context, ds, key string) error {
	return c.st.SetKeyPaused(ctx, ds, key, true)
}

// ResumeKey undoes PauseKey: key's held tasks go back to their turns.
func (c *Control) ResumeKey(ctx context.Context, ds, key string) error {
	if err := c.st.SetKeyPaused(ctx, ds, key, false); err != nil {
		return err
	}
	return c.unhold(ctx, ds, key)
}

// ClearKey removes every key control of key on ds (rate, weight, pause):
// the configuration's values hold again.
func (c *Control) ClearKey(ctx context.Context, ds, key string) error {
	if err := c.st.ClearKey(ctx, ds, key); err != nil {
		return err
	}
	return c.unhold(ctx, ds, key)
}

// KeyControls reads every key control set on ds, by key.
func (c *Control) KeyControls(ctx context.Context, ds string) (map[string]KeyControl, error) {
	return c.st.KeyControls(ctx, ds)
}

// unholdBatch bounds the tasks one call moves back (fair.lua's resume).
const unholdBatch = 1000

// unhold moves key's held tasks back to fair order, a batch per call,
// and makes its tasks a ceiling spaced out due now (fair.lua's resume).
// Feeds also move a few per call, so one that fails leaves nothing stuck.
func (c *Control) unhold(ctx context.Context, ds, key string) error {
	for {
		n, err := c.fair.Resume(ctx, ds, key, unholdBatch)
		if err != nil {
			return fmt.Errorf("shaping: resume key of %q: %w", ds, err)
		}
		if n < unholdBatch {
			return nil
		}
	}
}
