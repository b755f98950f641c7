package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/shaper-io/shaper/internal/plan"
	"github.com/shaper-io/shaper/internal/server"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// DownstreamStatus is one downstream as GET /v1/downstreams shows it.
type DownstreamStatus struct {
	Name string `json:"name"`
	// Configured is the rate in the config file; InForce the rate this
	// process releases at now (schedule, override and adaptive applied).
	Configured string       `json:"configured_rate"`
	InForce    float64      `json:"rate_per_second"`
	Override   string       `json:"override_rate,omitempty"`
	Adaptive   float64      `json:"adaptive_rate_per_second,omitempty"`
	Paused     bool         `json:"paused"`
	Workers    int          `json:"workers"`
	MaxWait    string       `json:"max_wait"`
	Backlog    *backlogJSON `json:"backlog,omitempty"`
}

// Status reads every downstream's status.
func Status(ctx context.Context, d *shaping.Dispatcher, in *queue.Inspector, pl *plan.Plan) ([]DownstreamStatus, error) {
	var out []DownstreamStatus
	for _, ds := range d.Downstreams() {
		st, err := d.Control().State(ctx, ds.Name)
		if err != nil {
			return nil, err
		}
		var configured string
		if pd, ok := pl.Downstream(ds.Name); ok {
			configured = pd.Written.Rate
		}
		s := DownstreamStatus{Name: ds.Name, Configured: configured, InForce: ds.Rate.PerSec(), Paused: st.Paused,
			Adaptive: st.Adaptive, Workers: ds.Workers, MaxWait: ds.MaxWait.String()}
		if !st.Override.IsZero() {
			s.Override = st.Override.RateString()
		}
		if b, err := in.Backlog(ds.Name); err == nil {
			s.Backlog = toBacklogJSON(b)
		}
		out = append(out, s)
	}
	return out, nil
}

// mountControl mounts runtime control: list, pause, resume, rate override.
// Every route needs the bearer token when one is configured.
func mountControl(srv *server.Server, d *shaping.Dispatcher, in *queue.Inspector, pl *plan.Plan) {
	known := func(w http.ResponseWriter, r *http.Request) (string, bool) {
		name := r.PathValue("name")
		if _, ok := pl.Downstream(name); !ok {
			server.WriteError(w, http.StatusNotFound, "unknown downstream "+quote(name))
			return "", false
		}
		return name, true
	}
	srv.Protected("GET /v1/downstreams", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, err := Status(r.Context(), d, in, pl)
		if err != nil {
			server.WriteError(w, http.StatusServiceUnavailable, "redis unreachable")
			return
		}
		server.WriteJSON(w, http.StatusOK, map[string]any{"downstreams": st})
	}))
	srv.Protected("POST /v1/downstreams/{name}/pause", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name, ok := known(w, r); ok {
			respond(w, d.Control().Pause(r.Context(), name), map[string]any{"downstream": name, "paused": true})
		}
	}))
	srv.Protected("POST /v1/downstreams/{name}/resume", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name, ok := known(w, r); ok {
			respond(w, d.Control().Resume(r.Context(), name), map[string]any{"downstream": name, "paused": false})
		}
	}))
	srv.Protected("PUT /v1/downstreams/{name}/rate", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := known(w, r)
		if !ok {
			return
		}
		var body struct {
			Rate json.RawMessage `json:"rate"`
		}
		dec := json.NewDecoder(io.LimitReader(r.Body, 4096))
		dec.DisallowUnknownFields()
		text, ok := "", false
		if err := dec.Decode(&body); err == nil {
			text, ok = rateText(body.Rate)
		}
		if !ok {
			server.WriteError(w, http.StatusBadRequest, `body must be {"rate": "20/s"} (or {"rate": ""} to remove the override)`)
			return
		}
		var l limiters.Limit
		if text != "" {
			var err error
			if l, err = limiters.ParseLimit(text); err != nil {
				server.WriteError(w, http.StatusBadRequest, "rate: "+rateReason(err))
				return
			}
			pd, _ := pl.Downstream(name)
			if err := pd.Shaping.CheckRate(l); err != nil {
				server.WriteError(w, http.StatusBadRequest, refusedRate(name, text, err))
				return
			}
		}
		err := d.Control().SetRate(r.Context(), name, l)
		if errors.Is(err, shaping.ErrRateTooSlow) || errors.Is(err, limiters.ErrInvalidLimit) {
			server.WriteError(w, http.StatusBadRequest, refusedRate(name, text, err))
			return
		}
		respond(w, err, map[string]any{"downstream": name, "override_rate": text})
	}))
}

// rateText is the rate of a PUT body: a JSON string as it is, or a JSON
// number (20 is 20/s) as written; ok is false for anything else.
func rateText(raw json.RawMessage) (string, bool) {
	var s string
	if string(raw) == "null" {
		return "", false
	}
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var n json.Number
	if len(raw) > 0 && raw[0] != '"' && json.Unmarshal(raw, &n) == nil {
		return n.String(), true
	}
	return "", false
}

func respond(w http.ResponseWriter, err error, ok any) {
	if err != nil {
		server.WriteError(w, http.StatusServiceUnavailable, "redis unreachable")
		return
	}
	server.WriteJSON(w, http.StatusOK, ok)
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// refusedRate says why downstream name cannot run at the rate written as
// text (Downstream.CheckRate's err), in the words ctl and the HTTP API
// answer with.
func refusedRate(name, text string, err error) string {
	var se *shaping.SlowRateError
	if !errors.As(err, &se) {
		return rateReason(err)
	}
	return fmt.Sprintf("rate %s is too slow for %s: one release of its largest cost (%d) would hold it for %s, over the limit of %s (such tasks would be archived, not wait)",
		quote(text), name, se.Cost, se.Hold.Round(time.Second), shaping.MaxInterval)
}

// rateReason is a limiters.ParseLimit error without the package's prefix:
// `invalid rate "fast" (want …)`, the words the config file uses.
func rateReason(err error) string {
	return strings.TrimPrefix(err.Error(), limiters.ErrInvalidLimit.Error()+": ")
}
