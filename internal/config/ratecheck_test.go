package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// refused parses doc and checks that it fails with one line naming path
// and containing each of want.
func refused(t *testing.T, doc, path string, want ...string) {
	t.Helper()
	_, err := Parse([]byte(doc))
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrInvalid) {
		t.Errorf("Parse(%q) = %v, want an *Error at %s", doc, err, path)
		return
	}
	if e.Path != path || strings.ContainsAny(err.Error(), "\r\n") {
		t.Errorf("Parse(%q): path %q, want %q (error: %v)", doc, e.Path, path, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Parse(%q) = %v, want it to contain %q", doc, err, w)
		}
	}
}

func accepted(t *testing.T, doc string) *Config {
	t.Helper()
	c, err := Parse([]byte(doc))
	if err != nil {
		t.Errorf("Parse(%q) = %v, want it accepted", doc, err)
	}
	return c
}

// one is a document with one log downstream whose body is lines.
func one(lines string) string {
	return "downstreams:\n  - name: api\n    handler: {type: log}\n" + indent(lines, "    ")
}

// Every rate a downstream may run at (its rate, a scheduled rate, the
// adaptive floor and ceiling) must let its largest release fit in one
// reservation (24h), as the dispatcher requires: at a slower rate every
// task would be archived, not wait.
func TestSlowRatesRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		doc, path string
		want      []string
	}{
		{"rate: 1/25h\n", "downstreams[0].rate", []string{`"1/25h" is too slow`, "max_cost 1, its default", "25h0m0s", "24h0m0s"}},
		{"rate: 1/s\nschedule: [{cron: \"0 8 * * *\", rate: 1/48h}]\n", "downstreams[0].schedule[0].rate", []string{`"1/48h" is too slow`, "48h0m0s"}},
		// the default max cost is what the bucket holds at the file's rate (100)
		{"rate: 100/s\nschedule: [{cron: \"0 8 * * *\", rate: 1/h}]\n", "downstreams[0].schedule[0].rate", []string{`"1/h"`, "max_cost 100, its default", "100h0m0s"}},
		{"rate: 1/s\nadaptive: {floor: 1/25h}\n", "downstreams[0].adaptive.floor", []string{`"1/25h" is too slow`}},
		{"rate: 10/s\nadaptive: {floor: 1/3h, ceiling: 5/s}\n", "downstreams[0].adaptive.floor", []string{`"1/3h" is too slow`, "max_cost 10, its default", "30h0m0s"}},
		{"rate: 1/h\nmax_cost: 25\n", "downstreams[0].max_cost", []string{`max_cost: 25 at rate "1/h" would hold the downstream for 25h0m0s`}},
		{"rate: 1/h\nmax_cost: 3\nbatch: {max_rows: 10}\n", "downstreams[0].max_cost", []string{"max_cost: 3 (× 10 rows of a batch) at rate", "30h0m0s"}},
		{"rate: 10/s\nmax_cost: 3\nbatch: {max_rows: 10}\nschedule: [{cron: \"0 8 * * *\", rate: 1/h}]\n", "downstreams[0].schedule[0].rate", []string{"max_cost 3, × 10 rows of a batch", "30h0m0s"}},
	} {
		refused(t, one(tt.doc), tt.path, tt.want...)
	}
	for _, doc := range []string{
		"rate: 1/24h\n",
		"rate: 1/d\n",
		"rate: 1/s\nschedule: [{cron: \"0 8 * * *\", rate: 1/24h}]\n",
		"rate: 100/s\nmax_cost: 24\nschedule: [{cron: \"0 8 * * *\", rate: 1/h}]\n",
		"rate: 1/s\nadaptive: {floor: 1/24h}\n",
		"rate: 1/h\nmax_cost: 2\nbatch: {max_rows: 10}\n",
	} {
		accepted(t, one(doc))
	}
}

// A spread quota paces one unit every per/limit: a pace slower than a
// release a day would archive every task, so it is refused where quotas
// are validated; a quota of days (1d, 7d) is accepted, and the default max
// cost stays within what a spread quota paces in a day.
func TestSpreadQuotas(t *testing.T) {
	t.Parallel()
	refused(t, one("rate: 10/s\nquotas: [{limit: 5, per: 168h, spread: true}]\n"), "downstreams[0].quotas[0]",
		"spread paces one unit every per/limit (33h36m0s)", "24h0m0s")
	refused(t, one("rate: 10/s\nmax_cost: 2\nquotas: [{limit: 7, per: 7d, spread: true}]\n"), "downstreams[0].quotas[0]",
		"a release of cost 2 would take 48h0m0s")
	c := accepted(t, one("rate: 10/s\nquotas: [{limit: 7, per: 7d, spread: true}, {limit: 5, per: 1d}, {limit: 100, per: 1d12h}]\n"))
	if c != nil {
		qs := c.Downstreams[0].Quotas
		if time.Duration(qs[0].Per) != 7*24*time.Hour || time.Duration(qs[1].Per) != 24*time.Hour || time.Duration(qs[2].Per) != 36*time.Hour {
			t.Errorf("per of 7d, 1d and 1d12h: got %s, %s, %s", qs[0].Per, qs[1].Per, qs[2].Per)
		}
		if m := c.Downstreams[0].DefaultMaxCost(); m != 1 {
			t.Errorf("default max cost under a spread quota of one unit a day: %d, want 1", m)
		}
	}
	accepted(t, one("rate: 10/s\nquotas: [{limit: 5, per: 168h}]\n")) // not spread: it waits, nothing archived
}

// Values the file writes that would be dropped or replaced without a word
// are refused with the field and the value.
func TestSilentValuesRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		doc, path string
		want      []string
	}{
		{"rate: 5/s\nfairness: {key_rate: fast}\n", "downstreams[0].fairness.key_rate", []string{`invalid rate "fast"`}},
		{"rate: 5/s\nfairness: {key_rate: 0/s}\n", "downstreams[0].fairness.key_rate", []string{`"0/s"`}},
		{"rate: 5/s\nfairness: {key_rate: -1/s}\n", "downstreams[0].fairness.key_rate", []string{`"-1/s"`}},
		{"rate: 5/s\nfairness: {key_rate: NaN/s}\n", "downstreams[0].fairness.key_rate", []string{`"NaN/s"`}},
		{"rate: 5/s\nfairness: {key_rate: 10/parsec}\n", "downstreams[0].fairness.key_rate", []string{`"10/parsec"`}},
		{"rate: 5/s\nfairness: {key_rate: 1/25h}\n", "downstreams[0].fairness.key_rate", []string{`"1/25h" is slower than one task per key in 24h0m0s`}},
		{"rate: 5/s\nfairness: {default_weight: 0}\n", "downstreams[0].fairness.default_weight", []string{"got 0"}},
		{"rate: 5/s\nquotas: [{limit: 2.5, per: 1h}]\n", "downstreams[0].quotas[0].limit", []string{"must be a whole number, got 2.5"}},
		{"rate: 5/s\nworkers: 3.7\n", "downstreams[0].workers", []string{"got 3.7"}},
		{"rate: 5/s\nmax_retry: 0.5\n", "downstreams[0].max_retry", []string{"got 0.5"}},
		{"rate: 5/s\nburst: 1.5\n", "downstreams[0].burst", []string{"got 1.5"}},
		{"rate: 5/s\nquotas: [{limit: 10, per: 1h, margin: 0s}]\n", "downstreams[0].quotas[0].margin", []string{"got 0s"}},
		{"rate: 5/s\nconcurrency: 2\nlease: 0s\n", "downstreams[0].lease", []string{"must be 1s to 1h", "got 0s"}},
		{"rate: 5/s\nconcurrency: 0\n", "downstreams[0].concurrency", []string{"must be 1-100000", "leave it out for no cap", "got 0"}},
		{"rate: 5/s\nkey_concurrency: 0\n", "downstreams[0].key_concurrency", []string{"got 0"}},
		{"rate: 5/s\nmax_cost: 0\n", "downstreams[0].max_cost", []string{"got 0"}},
		{"rate: 5/s\nadaptive: {floor: 1/s, decrease: 0}\n", "downstreams[0].adaptive.decrease", []string{"got 0"}},
		{"rate: 5/s\nadaptive: {floor: 1/s, interval: 0s}\n", "downstreams[0].adaptive.interval", []string{"got 0s"}},
	} {
		refused(t, one(tt.doc), tt.path, tt.want...)
	}
	for _, doc := range []string{
		"rate: 5/s\nfairness: {key_rate: 1/24h, default_weight: 0.5}\n",
		"rate: 5/s\nworkers: 3.0\nmax_retry: 1e1\n", // whole numbers
		"rate: 5/s\nconcurrency: 1\nkey_concurrency: 1\nlease: 1s\n",
		"rate: 5/s\nmax_retry: 0\n",
		"rate: 5/s\nfairness: {weights: {a: 2.5}}\n",
	} {
		accepted(t, one(doc))
	}
}

// max_hold: how long one answer may hold the downstream; default 1h,
// more than 0 and at most 24h, written as any duration.
func TestMaxHold(t *testing.T) {
	t.Parallel()
	for doc, want := range map[string]time.Duration{
		"rate: 5/s\n":                 time.Hour,
		"rate: 5/s\nmax_hold: 5m\n":   5 * time.Minute,
		"rate: 5/s\nmax_hold: 1d\n":   24 * time.Hour,
		"rate: 5/s\nmax_hold: 24h\n":  24 * time.Hour,
		"rate: 5/s\nmax_hold: 1ms\n":  time.Millisecond,
		"rate: 5/s\nmax_hold: ~\n":    time.Hour,
		"rate: 5/s\nmax_hold: 90m\n":  90 * time.Minute,
		"rate: 5/s\nmax_hold: 0.5d\n": 12 * time.Hour,
	} {
		if c := accepted(t, one(doc)); c != nil && time.Duration(c.Downstreams[0].MaxHold) != want {
			t.Errorf("%q: max_hold %s, want %s", doc, c.Downstreams[0].MaxHold, want)
		}
	}
	refused(t, one("rate: 5/s\nmax_hold: 0s\n"), "downstreams[0].max_hold", "got 0s", "at most 24h0m0s")
	refused(t, one("rate: 5/s\nmax_hold: 25h\n"), "downstreams[0].max_hold", "got 25h0m0s")
	refused(t, one("rate: 5/s\nmax_hold: -1m\n"), "downstreams[0].max_hold", "got -1m0s")
	refused(t, one("rate: 5/s\nmax_hold: 2d\n"), "downstreams[0].max_hold", "got 48h0m0s")
	refused(t, one("rate: 5/s\nmax_hold: soon\n"), "downstreams[0].max_hold", `invalid duration "soon"`)
}
