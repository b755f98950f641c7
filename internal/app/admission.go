package app

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/plan"
	"github.com/shaper-io/shaper/queue"
)

// BuildAdmission turns the config's admission policies into the
// Producer's (plan.Plan.NewAdmission).
func BuildAdmission(rdb redis.UniversalClient, cfg *config.Config, reg prometheus.Registerer) (map[string]queue.Admission, error) {
	pl, err := plan.Build(cfg)
	if err != nil {
		return nil, err
	}
	return pl.NewAdmission(rdb, reg)
}

// NewProducer builds the Producer for cfg (plan.Plan.NewProducer):
// admission, known downstreams, the payload limit.
func NewProducer(rdb redis.UniversalClient, cfg *config.Config, reg prometheus.Registerer) (*queue.Producer, error) {
	pl, err := plan.Build(cfg)
	if err != nil {
		return nil, err
	}
	return pl.NewProducer(rdb, reg)
}
