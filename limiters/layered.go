package limiters

import (
	"context"
	"errors"
	"fmt"
)

// Layer is one limiter in a Layered stack.
type Layer struct {
	Limiter Limiter
	// Key maps the request's key to this layer's key; nil uses the request
	// key as it is. Global returns a Key for a layer shared by all keys.
	Key func(requestKey string) string
}

// GlobalKey is the key a Global layer charges.
const GlobalKey = "_global"

// Global is a Layer.Key that maps every request to one shared key.
func Global(string) string { return GlobalKey }

type layerCharge struct {
	layer int
	key   string
	res   Result
}

// Layered passes a request only if every layer allows it, in order. When a
// layer rejects, the layers already charged are refunded, so a rejection
// never leaves the others charged. (The layers' keys may live on different
// cluster slots, so one script cannot cover them; refunds can.)
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
// when all allow, the one with the least Remaining.
func (l *Layered) Allow(ctx context.Context, key string, cost int64) (Result, error) {
	var charged []layerCharge
	var best Result
	var softErr error // fail-open errors are reported, not fatal
	for i := range l.layers {
		k := l.key(i, key)
		res, err := l.layers[i].Limiter.Allow(ctx, k, cost)
		if err != nil && !errors.Is(err, ErrFailedOpen) {
			rerr := l.refund(ctx, cost, charged)
			return res, errors.Join(fmt.Errorf("layer %d: %w", i, err), rerr)
		}
		if err != nil {
			softErr = errors.Join(softErr, err)
		}
		if !res.Allowed {
			if rerr := l.refund(ctx, cost, charged); rerr != nil {
				return res, rerr
			}
			return res, softErr
		}
		charged = append(charged, layerCharge{layer: i, key: k, res: res})
		if i == 0 || res.Remaining < best.Remaining {
			best = res
		}
	}
	best.layers = charged
	return best, softErr
}

// Peek asks every layer without charging; the first rejection decides.
func (l *Layered) Peek(ctx context.Context, key string, cost int64) (Result, error) {
	var best Result
	for i := range l.layers {
		res, err := l.layers[i].Limiter.Peek(ctx, l.key(i, key), cost)
		if err != nil || !res.Allowed {
			return res, err
		}
		if i == 0 || res.Remaining < best.Remaining {
			best = res
		}
	}
	return best, nil
}

// Refund gives back every layer charged by the Allow that returned res.
func (l *Layered) Refund(ctx context.Context, _ string, cost int64, res Result) error {
	return l.refund(ctx, cost, res.layers)
}

func (l *Layered) refund(ctx context.Context, cost int64, charged []layerCharge) error {
	var errs []error
	for _, c := range charged {
		if err := l.layers[c.layer].Limiter.Refund(ctx, c.key, cost, c.res); err != nil {
			errs = append(errs, fmt.Errorf("refund layer %d: %w", c.layer, err))
		}
	}
	return errors.Join(errs...)
}
