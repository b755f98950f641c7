package plan

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/clock"
	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/metrics"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
)

// Admission is a downstream's admission policy, ready to build on a Redis
// client (NewAdmission).
type Admission struct {
	// Layers are asked in order; all must allow.
	Layers []Layer
	// Prefilter rejects keys known to be over their limit in-process.
	Prefilter bool
	// OnReject is what the producer does with a rejected task.
	OnReject queue.OnReject
}

// Layer is one admission limiter.
type Layer struct {
	// Limiter configures the limiter; Observe is set by NewAdmission.
	Limiter limiters.Config
	// Global counts every task of the downstream under one key
	// (limiters.Global); otherwise each task's key counts on its own.
	Global bool
	// Mode is the mode the limiter starts in (limiter's mode in the file).
	Mode limiters.Mode
}

// admission is dc's policy, nil when it has none.
func admission(cfg *config.Config, dc config.Downstream) *Admission {
	a := dc.Admission
	if a == nil || len(a.Limiters) == 0 {
		return nil
	}
	out := &Admission{Prefilter: a.Prefilter}
	if a.OnReject == config.Defer {
		out.OnReject = queue.Defer
	}
	for _, lc := range a.Limiters {
		out.Layers = append(out.Layers, Layer{Global: lc.Key == config.KeyGlobal, Mode: lc.Mode.Limiters(), Limiter: limiters.Config{
			Name: lc.Name, Algorithm: lc.Algorithm, Limit: lc.Limit(), SubWindows: lc.SubWindows, Prefix: cfg.Redis.Prefix,
			Failure: a.Policy(), Timeout: time.Duration(cfg.Redis.Timeout)}})
	}
	return out
}

// NewAdmission builds the plan's admission policies on rdb, the
// producer's Admission; every script call is observed on reg (nil: not).
func (p *Plan) NewAdmission(rdb redis.UniversalClient, reg prometheus.Registerer) (map[string]queue.Admission, error) {
	return p.NewAdmissionAt(rdb, reg, nil)
}

// NewAdmissionAt is NewAdmission with every decision made at clk's time
// instead of the Redis clock (limiters.Config.Clock; nil: the Redis
// clock): for replaying recorded arrivals (shaper replay) and the tests
// that compare a replay with a live run.
func (p *Plan) NewAdmissionAt(rdb redis.UniversalClient, reg prometheus.Registerer, clk clock.Clock) (map[string]queue.Admission, error) {
	m := metrics.New(reg)
	out := map[string]queue.Admission{}
	for _, d := range p.Downstreams {
		a, ok := p.Admission[d.Shaping.Name]
		if !ok {
			continue
		}
		var layers []limiters.Layer
		var modes []queue.LimiterMode
		for _, l := range a.Layers {
			lc := l.Limiter
			lc.Clock = clk
			lc.Observe = func(alg limiters.Algorithm, name string, d time.Duration, err error) {
				m.ObserveScript(string(alg), d, err)
			}
			lim, err := limiters.New(rdb, lc)
			if err != nil {
				return nil, err
			}
			layer := limiters.Layer{Limiter: lim, Mode: limiters.NewModeVar(l.Mode)}
			if l.Global {
				layer.Key = limiters.Global
			}
			layers = append(layers, layer)
			modes = append(modes, queue.LimiterMode{Name: lc.Name, Configured: l.Mode, Var: layer.Mode})
		}
		layered, err := limiters.NewLayered(layers...)
		if err != nil {
			return nil, err
		}
		var lim limiters.Limiter = layered
		if a.Prefilter {
			lim = limiters.NewPrefilter(layered, 0, nil)
		}
		out[d.Shaping.Name] = queue.Admission{Limiter: lim, OnReject: a.OnReject, Modes: modes}
	}
	return out, nil
}

// NewProducer builds the plan's producer on rdb: admission, known
// downstreams, retry budgets, cost bounds, batching, the payload limit.
// Its metrics go to reg; nil records none.
func (p *Plan) NewProducer(rdb redis.UniversalClient, reg prometheus.Registerer) (*queue.Producer, error) {
	adm, err := p.NewAdmission(rdb, reg)
	if err != nil {
		return nil, err
	}
	pc := p.Producer
	pc.Admission, pc.Registerer = adm, reg
	return queue.NewProducer(rdb, pc), nil
}
