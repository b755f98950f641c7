package app

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/plan"
	"github.com/shaper-io/shaper/internal/server"
	"github.com/shaper-io/shaper/internal/statuspage"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// mountStatus mounts the live status page (package statuspage): GET / and
// GET /status (HTML), GET /status.json. They are open, read-only, and show
// names, rates and counts only. The backlog on the page is the
// shaper_queue_tasks gauge that Run keeps fresh from the Inspector, so a
// page view never reaches Redis.
//
// The page's sampler (one Gather of reg a second, and one read of each
// downstream's runtime state) runs until ctx ends. Every process publishes
// its summary to the others (statuspage.Fleet: an HSET every 2s and an
// HGETALL a second), so any process's page shows the whole fleet.
func mountStatus(ctx context.Context, srv *server.Server, d *shaping.Dispatcher, pl *plan.Plan, reg *prometheus.Registry, rdb redis.UniversalClient) {
	page := statuspage.New(statuspage.Options{Gatherer: reg, Dispatcher: d, Plan: pl,
		Fleet: statuspage.NewFleet(rdb, pl.Prefix, pl.Listen)})
	page.Mount(srv)
	go page.Run(ctx)
}

// backlogJSON is a queue.Backlog as the JSON outputs (GET /v1/downstreams,
// shaper ctl status) show it: snake_case like every other field there.
type backlogJSON struct {
	Pending   int `json:"pending"`
	Active    int `json:"active"`
	Scheduled int `json:"scheduled"`
	Retry     int `json:"retry"`
	Archived  int `json:"archived"`
	Completed int `json:"completed"`
	Processed int `json:"processed_today"`
	Failed    int `json:"failed_today"`
}

func toBacklogJSON(b queue.Backlog) *backlogJSON {
	return &backlogJSON{Pending: b.Pending, Active: b.Active, Scheduled: b.Scheduled, Retry: b.Retry,
		Archived: b.Archived, Completed: b.Completed, Processed: b.Processed, Failed: b.Failed}
}
