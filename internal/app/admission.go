package app

import (
	"cmp"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/metrics"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// BuildAdmission turns the config's admission policies into the Producer's;
// the limiters' script latencies go to reg (nil: nowhere).
func BuildAdmission(rdb redis.UniversalClient, cfg *config.Config, reg prometheus.Registerer) (map[string]queue.Admission, error) {
	m := metrics.New(reg)
	out := map[string]queue.Admission{}
	for _, ds := range cfg.Downstreams {
		a := ds.Admission
		if a == nil || len(a.Limiters) == 0 {
			continue
		}
		var layers []limiters.Layer
		for _, lc := range a.Limiters {
			lim, err := limiters.New(rdb, limiters.Config{
				Name: lc.Name, Algorithm: lc.Algorithm, Limit: lc.Limit(), SubWindows: lc.SubWindows, Prefix: cfg.Redis.Prefix,
				Failure: a.Policy(), Timeout: time.Duration(cfg.Redis.Timeout),
				Observe: func(alg limiters.Algorithm, name string, d time.Duration, err error) {
					m.ObserveScript(string(alg), d, err)
				},
			})
			if err != nil {
				return nil, err
			}
			layer := limiters.Layer{Limiter: lim}
			if lc.Key == config.KeyGlobal {
				layer.Key = limiters.Global
			}
			layers = append(layers, layer)
		}
		layered, err := limiters.NewLayered(layers...)
		if err != nil {
			return nil, err
		}
		var l limiters.Limiter = layered
		if a.Prefilter {
			l = limiters.NewPrefilter(layered, 0, nil)
		}
		adm := queue.Admission{Limiter: l}
		if a.OnReject == config.Defer {
			adm.OnReject = queue.Defer
		}
		out[ds.Name] = adm
	}
	return out, nil
}

// NewProducer builds the Producer for cfg: admission, known downstreams,
// the payload limit.
func NewProducer(rdb redis.UniversalClient, cfg *config.Config, reg prometheus.Registerer) (*queue.Producer, error) {
	adm, err := BuildAdmission(rdb, cfg, reg)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(cfg.Downstreams))
	retries := map[string]int{}
	batched := map[string]int{}
	maxCost := map[string]int64{}
	for _, d := range cfg.Downstreams {
		names = append(names, d.Name)
		retries[d.Name] = d.MaxRetry
		maxCost[d.Name] = MaxCost(d)
		if g := d.BatchGroups(); g > 0 {
			batched[d.Name] = g
		}
	}
	return queue.NewProducer(rdb, queue.ProducerConfig{Prefix: cfg.Redis.Prefix, Downstreams: names,
		Admission: adm, Registerer: reg, MaxPayload: int(cfg.HTTP.MaxBody), MaxRetry: retries, Batched: batched, MaxCost: maxCost}), nil
}

// MaxCost is the largest cost a task for d may carry: its max_cost, or
// what its bucket holds.
func MaxCost(d config.Downstream) int64 {
	return cmp.Or(d.MaxCost, shaping.DefaultMaxCost(d.Limit(), d.MaxWaitDuration(), d.Burst))
}
