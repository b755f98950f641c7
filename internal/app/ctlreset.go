package app

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/plan"
	"github.com/shaper-io/shaper/shaping"
)

// ctlReset clears every hold on downstream name (`shaper ctl reset NAME`)
// and says which it found: the bucket, the announced limit, each quota.
func ctlReset(ctx context.Context, pl *plan.Plan, rdb redis.UniversalClient, name string, out io.Writer) error {
	pd, _ := pl.Downstream(name)
	c, err := shaping.NewControl(rdb, pl.Prefix).Reset(ctx, name, pd.Shaping.Quotas)
	if err != nil {
		return err
	}
	if !c.Any() {
		fmt.Fprintf(out, "%s: nothing to clear (no bucket ahead, no announced limit, no quota use)\n", name)
		return nil
	}
	var did []string
	if c.Bucket {
		did = append(did, "bucket (next_free)")
	}
	if c.Announced {
		did = append(did, "announced limit")
	}
	for _, q := range c.Quotas {
		did = append(did, "quota "+q)
	}
	fmt.Fprintf(out, "%s: cleared %s; every process releases at the rate within a second\n", name, strings.Join(did, ", "))
	return nil
}

// ctlBreaker opens or closes downstream name's circuit breaker (`shaper
// ctl breaker NAME open|close|clear`; clear is close: closed now, its
// counts forgotten) and says what it was.
func ctlBreaker(ctx context.Context, pl *plan.Plan, rdb redis.UniversalClient, name, op string, out io.Writer) error {
	pd, _ := pl.Downstream(name)
	if pd.Shaping.Breaker == nil {
		return fmt.Errorf("%w: downstream %q has no circuit breaker (breaker: in its config)", ErrUsage, name)
	}
	var open bool
	switch op {
	case "open":
		open = true
	case "close", "clear":
	default:
		return fmt.Errorf("%w: breaker takes open, close or clear, got %q", ErrUsage, op)
	}
	before, err := shaping.NewControl(rdb, pl.Prefix).SetBreaker(ctx, name, pd.Shaping.Breaker, open)
	if err != nil {
		return err
	}
	now := "closed (counts forgotten)"
	if open {
		now = "open for its cool-down, then probing"
	}
	fmt.Fprintf(out, "%s: breaker was %s, now %s in every process within a second\n", name, before, now)
	return nil
}
