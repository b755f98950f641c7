package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/explain"
	"github.com/shaper-io/shaper/internal/httpapi"
	"github.com/shaper-io/shaper/internal/server"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// mountAPI mounts the enqueue and control endpoints. The enqueue API
// (package httpapi, docs/http-api.md):
//
//	POST /v1/downstreams/{downstream}/tasks
//	POST /v1/tasks
//	GET  /v1/downstreams/{downstream}/tasks/{id}
//
// All of them require the bearer token when http.token_env is set.
func mountAPI(srv *server.Server, p *queue.Producer, d *shaping.Dispatcher, in *queue.Inspector, rdb redis.UniversalClient, prefix string, names []string, maxBody int64, log *slog.Logger) {
	explainTask := func(ctx context.Context, ds, id string) (explain.Explanation, error) {
		return explain.Task(ctx, in, rdb, prefix, ds, id, time.Now())
	}
	httpapi.New(httpapi.Config{Producer: p, Inspector: in, MaxBody: maxBody, Logger: log, Explain: explainTask, Downstreams: names}).Mount(srv)
}
