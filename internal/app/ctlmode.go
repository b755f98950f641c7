package app

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/shaper-io/shaper/internal/plan"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/shaping"
)

// ctlMode runs "ctl mode NAME [LIMITER] shadow|enforce|clear".
func ctlMode(ctx context.Context, ctl *shaping.Control, pl *plan.Plan, rest []string, out io.Writer) error {
	if len(rest) != 3 && len(rest) != 4 {
		return fmt.Errorf("%w: \"mode\" takes NAME [LIMITER] and shadow, enforce or clear\n%s", ErrUsage, ctlUsage)
	}
	name, limiter, word := rest[1], "", rest[len(rest)-1]
	pd, ok := pl.Downstream(name)
	if !ok {
		return fmt.Errorf("%w: unknown downstream %q", ErrUsage, name)
	}
	what := name + "'s shaping"
	if len(rest) == 4 {
		limiter = rest[2]
		if names := limiterNames(pl, name); !slices.Contains(names, limiter) {
			return fmt.Errorf("%w: downstream %q has no admission limiter %q (it has %v)", ErrUsage, name, limiter, names)
		}
		what = fmt.Sprintf("%s's limiter %s", name, limiter)
	}
	if word == "clear" {
		if err := ctl.ClearMode(ctx, name, limiter); err != nil {
			return err
		}
		st, err := ctl.State(ctx, name)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s: runtime mode removed; back to the config's %s\n", what, modesOf(pd, st)[modeKey(limiter)])
		return nil
	}
	m, err := limiters.ParseMode(word)
	if err != nil {
		return fmt.Errorf("%w: mode %q: want shadow, enforce or clear", ErrUsage, word)
	}
	if err := ctl.SetMode(ctx, name, limiter, m); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s: %s in every process within a second\n", what, m)
	return nil
}

// limiterNames lists downstream ds's admission limiters.
func limiterNames(pl *plan.Plan, ds string) []string {
	var out []string
	for _, l := range pl.Admission[ds].Layers {
		out = append(out, l.Limiter.Name)
	}
	return out
}

func modeKey(limiter string) string {
	if limiter == "" {
		return "shaping"
	}
	return limiter
}

// modesOf is every mode in force for a downstream: "shaping" and each
// admission limiter by name, the runtime mode over the configured one.
func modesOf(pd *plan.Downstream, st shaping.State) map[string]string {
	out := map[string]string{"shaping": st.ModeOf("", pd.Shaping.ShapingMode).String()}
	for _, l := range pd.Written.Limiters {
		out[l.Name] = st.ModeOf(l.Name, l.Mode).String()
	}
	return out
}
