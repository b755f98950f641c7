package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/config"
)

func TestQuotasConfig(t *testing.T) {
	t.Parallel()
	good := `
redis: {url: "redis://127.0.0.1:6379"}
downstreams:
  - name: partner
    rate: 50/s
    quotas:
      - {limit: 5000, per: 1h}
      - {limit: 100000, per: 24h, align: "00:00 UTC", spread: true}
      - {limit: 300, per: 30s, margin: 50ms}
      - {limit: 800, per: 1h, align: "09:30 +02:00"}
    handler: {type: http, url: "http://127.0.0.1:9400/x", cost_header: X-Request-Cost, cost_json: data.cost}
`
	c, err := config.Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	qs := c.Downstreams[0].Quotas
	if off, ok := qs[0].Offset(); ok || off != 0 {
		t.Errorf("a sliding quota: Offset = %s, %v; want 0, false", off, ok)
	}
	if off, ok := qs[1].Offset(); !ok || off != 0 || !qs[1].Spread {
		t.Errorf("00:00 UTC per 24h: Offset = %s, %v, spread %v; want 0, true, true", off, ok, qs[1].Spread)
	}
	// 09:30 at +02:00 is 07:30 UTC: windows start at :30 of each hour
	if off, ok := qs[3].Offset(); !ok || off != 30*time.Minute {
		t.Errorf("09:30 +02:00 per 1h: Offset = %s, %v; want 30m, true", off, ok)
	}
	if h := c.Downstreams[0].Handler; h.CostHeader != "X-Request-Cost" || h.CostJSON != "data.cost" {
		t.Errorf("handler cost fields: %q %q", h.CostHeader, h.CostJSON)
	}

	base := "redis: {url: \"redis://127.0.0.1:6379\"}\ndownstreams:\n  - name: db\n    rate: 5/s\n    handler: {type: http, url: \"http://h/\"}\n"
	bad := []struct{ extra, want string }{
		{"    quotas: [{limit: 0, per: 1h}]\n", `downstreams[0].quotas[0].limit: must be at least 1, got 0`},
		{"    quotas: [{limit: 10}]\n", `downstreams[0].quotas[0].per: required`},
		{"    quotas: [{limit: 10, per: 500ms}]\n", `downstreams[0].quotas[0].per: must be whole milliseconds from 1s to 8784h0m0s, got 500ms`},
		{"    quotas: [{limit: 10, per: 1h, align: \"25:00\"}]\n", `downstreams[0].quotas[0].align: invalid alignment "25:00": no such time of day`},
		{"    quotas: [{limit: 10, per: 24h, align: \"00:00 Europe/Berlin\"}]\n", `downstreams[0].quotas[0].align: invalid alignment "00:00 Europe/Berlin": zone Europe/Berlin: want UTC or a fixed offset`},
		{"    quotas: [{limit: 10, per: 7h, align: \"00:00\"}]\n", `downstreams[0].quotas[0].align: set with per 7h0m0s, which does not divide a day`},
		{"    quotas: [{limit: 10, per: 1h}, {limit: 20, per: 1h}]\n", `downstreams[0].quotas[1]: same period and alignment as quota [0]: merge them`},
		{"    quotas: [{limit: 10, per: 4s, margin: 2s}]\n", `downstreams[0].quotas[0].margin: must be between 0 and a quarter of the period (1s), got 2s`},
		{"    max_cost: 20\n    quotas: [{limit: 10, per: 1h}]\n", `downstreams[0].quotas[0].limit: 10 is below the largest release's cost, 20: such a task could never be released`},
		{"    quotas: [{limit: 10, per: 1h}]\n    batch: {max_rows: 50}\n", `downstreams[0].quotas[0].limit: 10 is below the largest release's cost`},
	}
	for i, b := range bad {
		_, err := config.Parse([]byte(base + b.extra))
		if err == nil || !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), b.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("case %d: err = %v, want one line containing %q", i, err, b.want)
		}
	}
	for i, b := range []struct{ handler, want string }{
		{"{type: log, cost_header: X-Cost}", `downstreams[0].handler.cost_header: only allowed for type http`},
		{"{type: http, url: \"http://h/\", cost_header: \"X Cost\"}", `downstreams[0].handler.cost_header: invalid header name "X Cost"`},
		{"{type: http, url: \"http://h/\", cost_json: \"data..cost\"}", `downstreams[0].handler.cost_json: invalid path "data..cost"`},
	} {
		_, err := config.Parse([]byte("downstreams:\n  - name: db\n    rate: 5/s\n    handler: " + b.handler + "\n"))
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("handler case %d: err = %v, want %q", i, err, b.want)
		}
	}
}
