package shaping

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/control"
	"github.com/shaper-io/shaper/internal/fairindex"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/sizing"
	"github.com/shaper-io/shaper/limiters"
)

// StateTTL is how long a downstream's runtime state (pause, rate override,
// adaptive rate) outlives its last change.
const StateTTL = control.StateTTL

// State is a downstream's runtime state as stored in Redis, shared by every
// process: Paused, Override (a rate replacing the configured one; zero:
// none), Adaptive (the AIMD rate in units per second; 0 when not in use)
// and Modes (the runtime modes SetMode set: the shaping's under "", each
// admission limiter's under its name). See control.State, the type it
// names, which producers share.
type State = control.State

// Control changes downstreams at runtime, for every process at once: each
// dispatcher reads the state at least every ControlInterval. Safe for
// concurrent use; needs no Dispatcher.
// The zero Control is not usable: NewControl builds one.
type Control struct {
	st    *control.Store // the state hash and the versions
	fair  *fairindex.Queue
	store *lua.Store
	space keys.Space
	// served finds a downstream the dispatcher owning this Control
	// serves (nil for a Control from NewControl), for SetRate's check.
	served func(name string) (Downstream, bool)
}

// NewControl returns a Control for keys under prefix.
func NewControl(rdb redis.Scripter, prefix string) *Control {
	return &Control{st: control.New(rdb, prefix), fair: fairindex.New(rdb, prefix), store: lua.New(rdb), space: keys.New(prefix)}
}

// bump tells every process that ds's state changed: they re-read it on
// their next control tick (processes also re-read everything every
// fullRefresh, so a lost bump delays a change, never loses it).
func (c *Control) bump(ctx context.Context, ds string) error { return c.st.Bump(ctx, ds) }

// Ping reports whether Redis answers, with the one command the control
// loop also uses.
func (c *Control) Ping(ctx context.Context) error {
	_, err := c.st.Versions(ctx)
	return err
}

// Pause stops releases of ds in every process: nothing more is taken from
// its queue, and tasks taken and waiting for a slot go back to the head of
// it, with no attempt consumed (a batching downstream's held tasks stay
// held). Nothing is dropped.
func (c *Control) Pause(ctx context.Context, ds string) error { return c.st.SetPaused(ctx, ds, true) }

// Resume undoes Pause.
func (c *Control) Resume(ctx context.Context, ds string) error { return c.st.SetPaused(ctx, ds, false) }

// SetRate overrides ds's rate in every process; the zero Limit removes the
// override (back to the configured or scheduled rate). Only l.Rate and
// l.Period are read. The Control of a Dispatcher refuses, for a
// downstream it serves, a rate that fails Downstream.CheckRate (the error
// wraps ErrRateTooSlow or limiters.ErrInvalidLimit); a Control from
// NewControl knows no downstream and checks only that l is a valid rate,
// so check with the downstream's CheckRate first. Either way the control
// loop ignores an override that fails CheckRate.
func (c *Control) SetRate(ctx context.Context, ds string, l limiters.Limit) error {
	if !l.IsZero() {
		if err := sizing.ValidateRate(l); err != nil {
			return err
		}
		if c.served != nil {
			if d, ok := c.served(ds); ok {
				if err := d.CheckRate(l); err != nil {
					return err
				}
			}
		}
	}
	return c.st.SetOverride(ctx, ds, l)
}

// State reads ds's runtime state.
func (c *Control) State(ctx context.Context, ds string) (State, error) { return c.st.State(ctx, ds) }

func milli(l limiters.Limit) int64 { return int64(l.PerSec()*1000 + 0.5) }

// fromMilli builds a Limit of m milli-units per second.
func fromMilli(m int64) limiters.Limit {
	m = max(m, 1)
	return limiters.Limit{Rate: m, Period: 1000 * time.Second, Burst: 1}
}

func (a *Adaptive) args(start limiters.Limit, now int64) lua.AdaptiveArgs {
	dec := a.Decrease
	if dec <= 0 || dec >= 1 {
		dec = 0.75
	}
	step := milli(a.Step)
	if step <= 0 {
		step = max(milli(a.Ceiling)/20, 1)
	}
	iv := a.Interval
	if iv <= 0 {
		iv = time.Second
	}
	return lua.AdaptiveArgs{Start: milli(start), Floor: milli(a.Floor), Ceiling: milli(a.Ceiling), Decrease: int64(dec * 1000),
		Step: step, Interval: int64(iv / time.Microsecond), TTL: StateTTL.Milliseconds(), Now: now}
}

// adaptiveEvent runs adaptive.lua and returns the shared rate.
func (c *Control) adaptiveEvent(ctx context.Context, ds string, a *Adaptive, start limiters.Limit, event string, now int64) (limiters.Limit, error) {
	m, err := c.store.Adaptive(ctx, c.space.DownstreamState(ds), lua.AdaptiveEvent(event), a.args(start, now))
	if err != nil {
		return limiters.Limit{}, fmt.Errorf("shaping: adaptive %q: %w", ds, err)
	}
	return fromMilli(m), nil
}

// Versions reads every downstream's change counter, the one command a
// process's control tick costs: a downstream whose counter moved has new
// runtime state (State). For producers that follow the runtime modes.
func (c *Control) Versions(ctx context.Context) (map[string]string, error) {
	return c.st.Versions(ctx)
}

// SetMode sets, in every process, the mode of ds's shaping (limiter "")
// or of its admission limiter called limiter: producers and dispatchers
// read it on their next control tick (within a second). It overrides the
// mode the configuration gives until ClearMode.
func (c *Control) SetMode(ctx context.Context, ds, limiter string, m limiters.Mode) error {
	return c.st.SetMode(ctx, ds, limiter, m)
}

// ClearMode removes a mode SetMode set: back to the configured one.
func (c *Control) ClearMode(ctx context.Context, ds, limiter string) error {
	return c.st.ClearMode(ctx, ds, limiter)
}
