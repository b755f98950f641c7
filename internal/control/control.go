// Package control is the runtime state of downstreams that every process
// shares through Redis: each downstream's state hash (pause, rate
// override, adaptive rate, runtime modes) and the versions hash whose
// counters tell the processes that a downstream's state changed, and a
// fair downstream's key controls (one key's rate, weight or pause: keys.go
// here; fair.lua reads them too). The field names of the state hash are
// written and read here only (the adaptive rate's field is written by
// adaptive.lua). The dispatcher
// (package shaping, whose Control is the operator's API) writes and
// follows it; producers (package queue) follow the modes and rates.
package control

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/limiters"
)

// StateTTL is how long a downstream's runtime state (pause, rate override,
// adaptive rate) outlives its last change.
const StateTTL = 30 * 24 * time.Hour

// ErrUnknownDownstream: a name that was never added, or that no
// downstream could have (shaping.ErrUnknownDownstream).
var ErrUnknownDownstream = errors.New("shaping: unknown downstream")

// State is a downstream's runtime state as stored in Redis, shared by every
// process.
type State struct {
	// Paused is true while the downstream is paused (false: the zero value).
	Paused bool
	// Override replaces the configured (or scheduled) rate; zero: none.
	Override limiters.Limit
	// Adaptive is the AIMD rate in units per second; 0 when not in use.
	Adaptive float64
	// Modes are the runtime modes set by SetMode: the shaping's under
	// "", each admission limiter's under its name. A name absent keeps
	// the mode its configuration gives; nil when none is set.
	Modes map[string]limiters.Mode
}

// ModeOf is the mode in force for the shaping (name "") or an admission
// limiter of a downstream whose state is st and whose configuration says
// configured.
func (st State) ModeOf(name string, configured limiters.Mode) limiters.Mode {
	if m, ok := st.Modes[name]; ok {
		return m
	}
	return configured
}

// The state hash's fields. Runtime modes live beside pause and the rate
// override: shapingModeField for the shaping, modeFieldPrefix+name for
// each admission limiter; a field absent means the configured mode.
const (
	pausedField         = PausedField
	overrideRateField   = "override_rate"
	overridePeriodField = "override_period_us"
	adaptiveField       = "ar" // milli-units per second (adaptive.lua)
	shapingModeField    = "shaping_mode"
	modeFieldPrefix     = "mode:"
)

// Store reads and writes the runtime state under one key prefix. Safe
// for concurrent use.
// The zero Store is not usable: New builds one.
type Store struct {
	rdb   redis.Scripter
	store *lua.Store
	space keys.Space
}

// New returns a Store over rdb for keys under prefix ("" means
// "shaper"). rdb must also be a redis.Cmdable (every go-redis client is).
func New(rdb redis.Scripter, prefix string) *Store {
	return &Store{rdb: rdb, store: lua.New(rdb), space: keys.New(prefix)}
}

// Cmd is the Store's client as a redis.Cmdable; it panics when the
// client given to New is not one.
func (s *Store) Cmd() redis.Cmdable {
	if cmd, ok := s.rdb.(redis.Cmdable); ok {
		return cmd
	}
	panic("shaping: Control needs a redis.Cmdable client")
}

// set writes field/value pairs kv of ds's state hash (an empty value
// deletes the field) and bumps ds's version. A name no downstream could
// have is ErrUnknownDownstream.
func (s *Store) set(ctx context.Context, ds string, kv ...string) error {
	return s.setHash(ctx, ds, s.space.DownstreamState(ds), kv...)
}

// setHash is set on the hash h of ds (its state, or its key controls).
func (s *Store) setHash(ctx context.Context, ds, h string, kv ...string) error {
	if !keys.ValidName(ds) {
		return fmt.Errorf("%w %q", ErrUnknownDownstream, ds)
	}
	var pairs [][2]string
	for i := 0; i+1 < len(kv); i += 2 {
		pairs = append(pairs, [2]string{kv[i], kv[i+1]})
	}
	if _, err := s.store.SetState(ctx, h, StateTTL.Milliseconds(), pairs...); err != nil {
		return fmt.Errorf("shaping: control %q: %w", ds, err)
	}
	return s.Bump(ctx, ds)
}

// Bump tells every process that ds's state changed: its version moves,
// and the change is announced on the control channel, so the processes
// re-read the versions on their next control tick. A process that missed
// the announcement (its subscription was down) reads the versions anyway
// every few ticks, and re-reads everything every full refresh, so a lost
// announcement delays a change, never loses it.
func (s *Store) Bump(ctx context.Context, ds string) error {
	k := s.space.ControlVersions()
	_, err := s.Cmd().Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HIncrBy(ctx, k, ds, 1)
		p.PExpire(ctx, k, StateTTL)
		p.Publish(ctx, s.space.ControlChannel(), ds)
		return nil
	})
	if err != nil {
		return fmt.Errorf("shaping: control %q: %w", ds, err)
	}
	return nil
}

// Versions reads every downstream's change counter (one command): a
// downstream whose counter moved has new runtime state.
func (s *Store) Versions(ctx context.Context) (map[string]string, error) {
	return s.Cmd().HGetAll(ctx, s.space.ControlVersions()).Result()
}

// PausedField is the field of a downstream's state HASH
// (keys.Space.DownstreamState) that is "1" while it is paused; a take
// checks it in its script (lua.TakePause).
const PausedField = "paused"

// SetPaused pauses ds (paused) or resumes it.
func (s *Store) SetPaused(ctx context.Context, ds string, paused bool) error {
	v := ""
	if paused {
		v = "1"
	}
	return s.set(ctx, ds, pausedField, v)
}

// SetOverride overrides ds's rate with l (Rate and Period); the zero
// Limit removes the override. It does not check l.
func (s *Store) SetOverride(ctx context.Context, ds string, l limiters.Limit) error {
	if l.IsZero() {
		return s.set(ctx, ds, overrideRateField, "", overridePeriodField, "")
	}
	return s.set(ctx, ds, overrideRateField, strconv.FormatInt(l.Rate, 10),
		overridePeriodField, strconv.FormatInt(int64(l.Period/time.Microsecond), 10))
}

// SetMode sets the runtime mode of ds's shaping (limiter "") or of its
// admission limiter called limiter. A limiter name that limiters.Config
// refuses is limiters.ErrInvalidLimit.
func (s *Store) SetMode(ctx context.Context, ds, limiter string, m limiters.Mode) error {
	f, err := modeField(limiter)
	if err != nil {
		return err
	}
	return s.set(ctx, ds, f, m.String())
}

// ClearMode removes a mode SetMode set: back to the configured one.
func (s *Store) ClearMode(ctx context.Context, ds, limiter string) error {
	f, err := modeField(limiter)
	if err != nil {
		return err
	}
	return s.set(ctx, ds, f, "")
}

// State reads ds's runtime state.
func (s *Store) State(ctx context.Context, ds string) (State, error) {
	h, err := s.Cmd().HGetAll(ctx, s.space.DownstreamState(ds)).Result()
	if err != nil {
		return State{}, fmt.Errorf("shaping: state of %q: %w", ds, err)
	}
	var st State
	st.Paused = h[pausedField] == "1"
	if r, p := atoi(h[overrideRateField]), atoi(h[overridePeriodField]); r > 0 && p > 0 {
		st.Override = limiters.Limit{Rate: r, Period: time.Duration(p) * time.Microsecond, Burst: r}
	}
	st.Adaptive = float64(atoi(h[adaptiveField])) / 1000
	st.Modes = parseModes(h)
	return st, nil
}

// atoi is s as an integer; 0 when it is not one.
func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

func modeField(limiter string) (string, error) {
	if limiter == "" {
		return shapingModeField, nil
	}
	if !limiterName(limiter) {
		return "", fmt.Errorf("%w: limiter name %q", limiters.ErrInvalidLimit, limiter)
	}
	return modeFieldPrefix + limiter, nil
}

// limiterName reports a limiter name as limiters.Config accepts it.
func limiterName(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-", r)) {
			return false
		}
	}
	return true
}

// parseModes reads the mode fields of a state hash; nil when there are
// none. Unreadable values are ignored (the configured mode holds).
func parseModes(h map[string]string) map[string]limiters.Mode {
	var out map[string]limiters.Mode
	for f, v := range h {
		name, ok := strings.CutPrefix(f, modeFieldPrefix)
		if f == shapingModeField {
			name, ok = "", true
		}
		m, err := limiters.ParseMode(v)
		if !ok || err != nil {
			continue
		}
		if out == nil {
			out = map[string]limiters.Mode{}
		}
		out[name] = m
	}
	return out
}
