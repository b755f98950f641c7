package app

import (
	"log/slog"

	"github.com/shaper-io/shaper/internal/server"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// mountAPI mounts the enqueue and control endpoints.
func mountAPI(srv *server.Server, p *queue.Producer, d *shaping.Dispatcher, in *queue.Inspector, maxBody int64, log *slog.Logger) {
}
