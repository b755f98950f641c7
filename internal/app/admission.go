package app

import (
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/metrics"
	"github.com/shaper-io/shaper/internal/producer"
	"github.com/shaper-io/shaper/queue"
)

// BuildAdmission is producer.BuildAdmission.
func BuildAdmission(rdb redis.UniversalClient, cfg *config.Config, m *metrics.Metrics) (map[string]queue.Admission, error) {
	return producer.BuildAdmission(rdb, cfg, m)
}

// NewProducer is producer.New.
func NewProducer(rdb redis.UniversalClient, cfg *config.Config, m *metrics.Metrics) (*queue.Producer, error) {
	return producer.New(rdb, cfg, m)
}

// MaxCost is producer.MaxCost.
func MaxCost(d config.Downstream) int64 { return producer.MaxCost(d) }
