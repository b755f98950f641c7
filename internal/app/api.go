package app

import (
	"log/slog"

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
func mountAPI(srv *server.Server, p *queue.Producer, d *shaping.Dispatcher, in *queue.Inspector, maxBody int64, log *slog.Logger) {
	httpapi.New(httpapi.Config{Producer: p, Inspector: in, MaxBody: maxBody, Logger: log}).Mount(srv)
}
