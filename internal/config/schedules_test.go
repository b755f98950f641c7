package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/shaper-io/shaper/internal/config"
)

func TestScheduleAdaptiveCronConfig(t *testing.T) {
	t.Parallel()
	good := `
redis: {url: "redis://127.0.0.1:6379"}
downstreams:
  - name: legacy-db
    rate: 50/s
    timezone: Europe/Berlin
    schedule:
      - {cron: "0 8 * * 1-5", rate: 50/s}
      - {cron: "0 20 * * 1-5", rate: 500/s}
    adaptive: {floor: 5/s, ceiling: 100/s, decrease: 0.5}
    handler: {type: log}
cron:
  - {name: nightly, schedule: "0 2 * * *", timezone: Europe/Berlin, downstream: legacy-db, payload: {table: orders}}
`
	c, err := config.Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if j := c.Cron[0]; j.Cost != 1 || j.Type != "shaper:cron" {
		t.Errorf("cron defaults: cost %d type %q", j.Cost, j.Type)
	}
	if p, _ := c.Cron[0].PayloadJSON(); string(p) != `{"table":"orders"}` {
		t.Errorf("payload JSON %s", p)
	}

	base := "redis: {url: \"redis://127.0.0.1:6379\"}\ndownstreams:\n  - name: db\n    rate: 5/s\n    handler: {type: log}\n"
	bad := []struct{ extra, want string }{
		{"    schedule: [{cron: \"61 * * * *\", rate: 5/s}]\n", `downstreams[0].schedule[0].cron: invalid cron expression "61 * * * *"`},
		{"    schedule: [{cron: \"0 8 * * *\", rate: fast}]\n", `downstreams[0].schedule[0].rate: invalid rate "fast"`},
		{"    schedule: [{rate: 5/s}]\n", `downstreams[0].schedule[0].cron: required`},
		{"    schedule: [{cron: \"*/10 * * * * *\", rate: 5/s}, {cron: \"0 * * * * *\", rate: 9/s}]\n", `downstreams[0].schedule[1].cron: "0 * * * * *" fires at the same time as schedule[0]`},
		{"    timezone: Mars/Olympus\n", `downstreams[0].timezone: unknown time zone "Mars/Olympus"`},
		{"    adaptive: {ceiling: 10/s}\n", `downstreams[0].adaptive.floor: required`},
		{"    adaptive: {floor: 20/s, ceiling: 10/s}\n", `downstreams[0].adaptive.floor: "20/s" is above the ceiling "10/s"`},
		{"    adaptive: {floor: 1/s, decrease: 1.5}\n", `downstreams[0].adaptive.decrease: must be between 0 and 1`},
		{"cron: [{name: x, schedule: \"every day\", downstream: db}]\n", `cron[0].schedule: invalid cron expression "every day"`},
		{"cron: [{name: x, schedule: \"@every 1m\", downstream: nope}]\n", `cron[0].downstream: unknown downstream "nope"`},
		{"cron: [{name: x, schedule: \"@daily\", downstream: db}, {name: x, schedule: \"@daily\", downstream: db}]\n", `cron[1].name: duplicate name "x"`},
		{"cron: [{name: x, schedule: \"@daily\", downstream: db, cost: 0}]\n", `cron[0].cost: must be at least 1, got 0`},
		{"cron: [{name: x, schedule: \"@daily\", timezone: Nowhere, downstream: db}]\n", `cron[0].timezone: unknown time zone "Nowhere"`},
		{"cron: [{name: x, schedule: \"@every 0s\", downstream: db}]\n", `cron[0].schedule: "@every 0s": the interval must be at least 1s, got 0s`},
		{"cron: [{name: x, schedule: \"@every -5s\", downstream: db}]\n", `cron[0].schedule: "@every -5s": the interval must be at least 1s, got -5s`},
		{"cron: [{name: x, schedule: \"@every 100ms\", downstream: db}]\n", `cron[0].schedule: "@every 100ms": the interval must be at least 1s, got 100ms`},
		{"cron: [{name: x, schedule: \"@every 1500ms\", downstream: db}]\n", `cron[0].schedule: "@every 1500ms": the interval must be whole seconds, got 1.5s`},
		{"cron: [{name: x, schedule: \"0 0 30 2 *\", downstream: db}]\n", `cron[0].schedule: "0 0 30 2 *" never fires`},
		{"cron: [{name: '..', schedule: \"@daily\", downstream: db}]\n", `cron[0].name: invalid name ".."`},
		{"    schedule: [{cron: \"@every 100ms\", rate: 5/s}]\n", `downstreams[0].schedule[0].cron: "@every 100ms": the interval must be at least 1s`},
		{"    schedule: [{cron: \"0 0 31 4 *\", rate: 5/s}]\n", `downstreams[0].schedule[0].cron: "0 0 31 4 *" never fires`},
		// 29 February falls on a Monday in 2044, years past a one-year replay.
		{"    schedule: [{cron: \"0 0 29 2 *\", rate: 5/s}, {cron: \"0 0 * * 1\", rate: 9/s}]\n", `downstreams[0].schedule[1].cron: "0 0 * * 1" fires at the same time as schedule[0] ("0 0 29 2 *"), at 20`},
	}
	for i, b := range bad {
		_, err := config.Parse([]byte(base + b.extra))
		if err == nil || !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), b.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("case %d: err = %v, want one line containing %q", i, err, b.want)
		}
	}
}
