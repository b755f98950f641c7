package app

import (
	"context"
	"strings"
	"testing"
)

// PUT /v1/downstreams/NAME/rate answers 400 with the reason for a rate the
// downstream cannot run at (its largest release would hold it past a
// day: every task archived), and writes nothing.
func TestRateRouteRefusesSlowRates(t *testing.T) {
	t.Parallel()
	r := newRoutes(t, "  - {name: api, rate: 1/s, handler: {type: log}}\n")
	d := r.d
	put := func(body string) (int, string) {
		code, _, msg := r.do(t, "PUT", "/v1/downstreams/api/rate", body)
		return code, msg
	}
	for _, body := range []string{`{"rate":"1/100h"}`, `{"rate":"1/25h"}`} {
		if code, msg := put(body); code != 400 || !strings.Contains(msg, "is too slow for api") || !strings.Contains(msg, "over the limit of 24h0m0s") {
			t.Errorf("PUT %s: %d %q, want 400 saying the rate is too slow", body, code, msg)
		}
	}
	if st, _ := d.Control().State(context.Background(), "api"); !st.Override.IsZero() {
		t.Errorf("a refused rate was written: override %v", st.Override)
	}
	if code, msg := put(`{"rate":"1/24h"}`); code != 200 {
		t.Errorf("PUT 1/24h: %d %q, want 200", code, msg)
	}
}

// PUT /v1/downstreams/NAME/rate reads a rate as the config file and ctl
// do: a bare number is per second (as a JSON string or number), and d is
// a unit with or without a count.
func TestRateRouteReadsRatesAsEverywhere(t *testing.T) {
	t.Parallel()
	r := newRoutes(t, "  - {name: api, rate: 20, max_cost: 1, handler: {type: log}}\n")
	d := r.d
	if got := r.pl.Downstreams[0].Shaping.Rate.RateString(); got != "20/s" {
		t.Errorf("rate: 20 in the config is %s, want 20/s", got)
	}
	for i, step := range []struct {
		body     string
		code     int
		override string // the override after the step, as RateString writes it
		msg      string // part of the error
	}{
		{`{"rate":"20"}`, 200, "20/s", ""},
		{`{"rate":7}`, 200, "7/s", ""},
		{`{"rate":2.5}`, 200, "5/2s", ""},
		{`{"rate":"1/1d"}`, 200, "1/d", ""},
		{`{"rate":"3/d"}`, 200, "3/d", ""},
		{`{"rate":"0"}`, 400, "3/d", `rate: invalid rate "0": a rate must be positive`},
		{`{"rate":"fast"}`, 400, "3/d", `rate: invalid rate "fast"`},
		{`{"rate":null}`, 400, "3/d", `body must be {"rate": "20/s"}`},
		{`{"rate":[20]}`, 400, "3/d", `body must be {"rate": "20/s"}`},
		{`{"rate":""}`, 200, "", ""},
	} {
		code, _, msg := r.do(t, "PUT", "/v1/downstreams/api/rate", step.body)
		st, err := d.Control().State(context.Background(), "api")
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if !st.Override.IsZero() {
			got = st.Override.RateString()
		}
		if code != step.code || got != step.override || !strings.Contains(msg, step.msg) {
			t.Errorf("step %d: PUT %s: %d %q, override %q; want %d %q, override %q", i, step.body, code, msg, got, step.code, step.msg, step.override)
		}
	}
}
