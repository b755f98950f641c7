package app

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/plan"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/server"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// routes is a server with the control routes (mountControl and
// mountKeyControl) over a dispatcher that serves the downstreams of a
// config, on a fresh prefix of the test Redis; it is not started, so it
// releases nothing.
type routes struct {
	pl   *plan.Plan
	d    *shaping.Dispatcher
	base string // http://host:port
}

// newRoutes builds routes for the downstreams in yaml (a config's
// downstreams list).
func newRoutes(t *testing.T, downstreams string) *routes {
	t.Helper()
	rdb, prefix := redistest.Client(t), redistest.Prefix(t)
	cfg, err := config.Parse([]byte("redis: {prefix: " + prefix + "}\ndownstreams:\n" + downstreams))
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	d := shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: quiet})
	for _, pd := range pl.Downstreams {
		ds := pd.Shaping
		ds.Handler = func(context.Context, *shaping.Task) error { return nil }
		if err := d.Add(ds); err != nil {
			t.Fatal(err)
		}
	}
	srv := server.New(server.Options{Addr: "127.0.0.1:0", Logger: quiet})
	mountControl(srv, d, queue.NewInspector(rdb, prefix), pl)
	mountKeyControl(srv, d, pl)
	addr, err := srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	return &routes{pl: pl, d: d, base: "http://" + addr}
}

// do sends a request and returns the status, the JSON body and its
// "error", if any.
func (r *routes) do(t *testing.T, method, path, body string) (int, map[string]any, string) {
	t.Helper()
	req, _ := http.NewRequest(method, r.base+path, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	json.NewDecoder(resp.Body).Decode(&v)
	msg, _ := v["error"].(string)
	return resp.StatusCode, v, msg
}
