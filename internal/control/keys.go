package control

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shaper-io/shaper/limiters"
)

// KeyControl is the operator's setting for one admission key of a fair
// downstream, shared by every process (shaper ctl key). A zero field
// leaves the configuration's value in force.
type KeyControl struct {
	// Rate replaces the key's ceiling (fairness.key_rates, else key_rate);
	// zero: none set.
	Rate limiters.Limit
	// Weight replaces the key's fair-share weight; 0: none set.
	Weight float64
	// Paused holds the key's tasks out of fair order: none of them is
	// promoted until the key resumes; the other keys keep the rate.
	Paused bool
}

// IsZero reports whether c sets nothing.
func (c KeyControl) IsZero() bool { return c == KeyControl{} }

// MaxKeyLen bounds an admission key named by a key control.
const MaxKeyLen = 1024

// ErrInvalidKey: an admission key a key control cannot name.
var ErrInvalidKey = errors.New("control: invalid key")

// The controls hash's field prefixes, read by fair.lua as well.
const (
	keyPausedPrefix = "p:"
	keyWeightPrefix = "w:"
	keyRatePrefix   = "r:"
)

// SetKeyRate sets key's ceiling on fair downstream ds to l (Rate and
// Period); the zero Limit removes it. It does not check l against the
// downstream: callers do (the file's rules for key_rate).
func (s *Store) SetKeyRate(ctx context.Context, ds, key string, l limiters.Limit) error {
	v := ""
	if !l.IsZero() {
		v = strconv.FormatInt(l.Rate, 10) + "/" + strconv.FormatInt(int64(l.Period/time.Microsecond), 10)
	}
	return s.setKey(ctx, ds, key, keyRatePrefix, v)
}

// SetKeyWeight sets key's weight on fair downstream ds; 0 removes it.
func (s *Store) SetKeyWeight(ctx context.Context, ds, key string, w float64) error {
	v := ""
	if w > 0 {
		v = strconv.FormatFloat(w, 'g', -1, 64)
	}
	return s.setKey(ctx, ds, key, keyWeightPrefix, v)
}

// SetKeyPaused pauses key on fair downstream ds, or lifts its pause (its
// held tasks then go back to fair order: see fairindex.Queue.Resume).
func (s *Store) SetKeyPaused(ctx context.Context, ds, key string, paused bool) error {
	v := ""
	if paused {
		v = "1"
	}
	return s.setKey(ctx, ds, key, keyPausedPrefix, v)
}

// ClearKey removes every setting of key on fair downstream ds.
func (s *Store) ClearKey(ctx context.Context, ds, key string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	return s.setHash(ctx, ds, s.space.Fair(ds).Controls, keyPausedPrefix+key, "", keyWeightPrefix+key, "", keyRatePrefix+key, "")
}

// KeyControls reads every key control of fair downstream ds (one
// command), by key.
func (s *Store) KeyControls(ctx context.Context, ds string) (map[string]KeyControl, error) {
	h, err := s.Cmd().HGetAll(ctx, s.space.Fair(ds).Controls).Result()
	if err != nil {
		return nil, fmt.Errorf("shaping: key controls of %q: %w", ds, err)
	}
	return parseKeyControls(h), nil
}

// parseKeyControls reads a controls hash; unreadable values are ignored
// (the configuration holds for them).
func parseKeyControls(h map[string]string) map[string]KeyControl {
	out := make(map[string]KeyControl, len(h))
	for f, v := range h {
		prefix, key := f[:min(2, len(f))], f[min(2, len(f)):]
		if key == "" {
			continue
		}
		c := out[key]
		switch prefix {
		case keyPausedPrefix:
			c.Paused = v == "1"
		case keyWeightPrefix:
			if w, err := strconv.ParseFloat(v, 64); err == nil && w > 0 {
				c.Weight = w
			}
		case keyRatePrefix:
			r, p, ok := strings.Cut(v, "/")
			if n, m := atoi(r), atoi(p); ok && n > 0 && m > 0 {
				c.Rate = limiters.Limit{Rate: n, Period: time.Duration(m) * time.Microsecond, Burst: 1}
			}
		default:
			continue
		}
		if !c.IsZero() {
			out[key] = c
		}
	}
	return out
}

// CheckKey reports an admission key a key control cannot name: empty, or
// longer than MaxKeyLen bytes.
func CheckKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("%w: a key must be 1 to %d bytes, got %d", ErrInvalidKey, MaxKeyLen, len(key))
	}
	return nil
}

func (s *Store) setKey(ctx context.Context, ds, key, prefix, v string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	return s.setHash(ctx, ds, s.space.Fair(ds).Controls, prefix+key, v)
}
