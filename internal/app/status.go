package app

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/server"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// mountStatus mounts the live status page.
func mountStatus(srv *server.Server, d *shaping.Dispatcher, in *queue.Inspector, cfg *config.Config, reg *prometheus.Registry) {
}
