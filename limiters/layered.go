package limiters

import (
	"context"
	"errors"
	"fmt"
)

// Layer is one limiter in a Layered stack.
type Layer struct {
	// Limiter decides for this layer; required (NewLayered refuses nil).
	Limiter Limiter
	// Key maps the request's key to this layer's key; nil uses the request
	// key as it is. Global returns a Key for a layer shared by all keys.
	Key func(requestKey string) string
	// Mode, when it reads Shadow, makes the layer decide and charge as if
	// enforced without applying its decision: a rejection (or an error) is
	// recorded in Result.Shadow and the other layers are asked as if it
	// had allowed. nil means Enforce. It may change between calls.
	Mode *ModeVar
}

// GlobalKey is the key a Global layer charges.
const GlobalKey = "_global"

// Global is a Layer.Key that maps every request to one shared key.
func Global(string) string { return GlobalKey }

// Layered passes a request only if every enforced layer allows it, in
// order. When a layer rejects, the layers already charged are refunded
// (shadow layers too), so a rejection never leaves the others charged.
// A layer in Shadow mode is asked like the others but never rejects. (The layers' keys may live on different
// cluster slots, so one script cannot cover them; refunds can.)
// The zero Layered is not usable: NewLayered builds one.
type Layered struct {
	layers []Layer
}

var _ Limiter = (*Layered)(nil)

// NewLayered stacks layers; the first is asked first. Put the cheapest or
// most often rejecting layer first.
func NewLayered(layers ...Layer) (*Layered, error) {
	if len(layers) == 0 {
		return nil, fmt.Errorf("%w: Layered needs at least one layer", ErrInvalidLimit)
	}
	for i, l := range layers {
		if l.Limiter == nil {
			return nil, fmt.Errorf("%w: layer %d has no Limiter", ErrInvalidLimit, i)
		}
	}
	return &Layered{layers: layers}, nil
}

func (l *Layered) key(i int, key string) string {
	if f := l.layers[i].Key; f != nil {
		return f(key)
	}
	return key
}

// Allow asks each layer in turn. The Result is the rejecting layer's, or,
// when all allow, the enforced one with the least Remaining (a Result with
// no Name when every layer is in shadow); its Cancel refunds every layer
// charged. FailedOpen is set when any enforced layer failed open. The
// shadow layers' decisions are in Result.Shadow.
func (l *Layered) Allow(ctx context.Context, key string, cost int64) (Result, error) {
	var charged []Result
	var shadow []ShadowDecision
	best, enforced := Result{Allowed: true}, 0
	var failedOpen []error // fail-open layers are reported, not fatal
	for i := range l.layers {
		res, err := l.layers[i].Limiter.Allow(ctx, l.key(i, key), cost)
		if l.layers[i].Mode.Load() == Shadow {
			shadow = append(shadow, ShadowDecision{Result: res, Err: err})
			if err == nil && res.Allowed {
				charged = append(charged, res)
			}
			continue
		}
		if res.FailedOpen {
			failedOpen = append(failedOpen, res.Cause)
		}
		res.Shadow = shadow
		if err != nil {
			rerr := cancelAll(ctx, charged)
			return res, errors.Join(fmt.Errorf("layer %d: %w", i, err), rerr)
		}
		if !res.Allowed {
			if rerr := cancelAll(ctx, charged); rerr != nil {
				return res, rerr
			}
			return withFailedOpen(res, failedOpen), nil
		}
		charged = append(charged, res)
		if enforced == 0 || res.Remaining < best.Remaining {
			best = res
		}
		enforced++
	}
	best.Shadow = shadow
	best = withFailedOpen(best, failedOpen)
	return best.WithCancel(func(ctx context.Context) error { return cancelAll(ctx, charged) }), nil
}

// withFailedOpen marks res as failed open when any layer was, with their
// causes joined.
func withFailedOpen(res Result, causes []error) Result {
	if len(causes) > 0 {
		res.FailedOpen = true
		res.Cause = errors.Join(causes...)
	}
	return res
}

// Peek asks every layer without charging; the first rejection by an
// enforced layer decides. Shadow layers' answers are in Result.Shadow.
func (l *Layered) Peek(ctx context.Context, key string, cost int64) (Result, error) {
	best, enforced := Result{Allowed: true}, 0
	var shadow []ShadowDecision
	var failedOpen []error
	for i := range l.layers {
		res, err := l.layers[i].Limiter.Peek(ctx, l.key(i, key), cost)
		if l.layers[i].Mode.Load() == Shadow {
			shadow = append(shadow, ShadowDecision{Result: res, Err: err})
			continue
		}
		if res.FailedOpen {
			failedOpen = append(failedOpen, res.Cause)
		}
		if err != nil || !res.Allowed {
			res.Shadow = shadow
			return withFailedOpen(res, failedOpen), err
		}
		if enforced == 0 || res.Remaining < best.Remaining {
			best = res
		}
		enforced++
	}
	best.Shadow = shadow
	return withFailedOpen(best, failedOpen), nil
}

// cancelAll cancels every charged layer's Result. A layer whose Cancel
// succeeded is not refunded again if the whole is retried.
func cancelAll(ctx context.Context, charged []Result) error {
	var errs []error
	for i, c := range charged {
		if err := c.Cancel(ctx); err != nil {
			errs = append(errs, fmt.Errorf("refund layer %d: %w", i, err))
		}
	}
	return errors.Join(errs...)
}
