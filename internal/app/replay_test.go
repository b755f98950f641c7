package app_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shaper-io/shaper/internal/app"
)

// replayConfig writes a config of two downstreams, a and b (b capped at
// 2 calls at a time), and returns its path.
func replayConfig(t *testing.T) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "shaper.yaml")
	yaml := "downstreams:\n  - {name: a, rate: 5/s, handler: {type: log}}\n  - {name: b, rate: 5/s, concurrency: 2, handler: {type: log}}\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// runReplay runs shaper replay on stdin and returns its stdout and stderr.
func runReplay(stdin string, tty bool, args ...string) (string, string, error) {
	var out, errs bytes.Buffer
	err := app.RunReplay(context.Background(), args, app.ReplayIO{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errs, StderrTTY: tty})
	return out.String(), errs.String(), err
}

func TestReplayErrors(t *testing.T) {
	t.Parallel()
	cfg := replayConfig(t)
	for _, args := range [][]string{{"-config", cfg}, {"x.jsonl"}, {"-config", cfg, "-reorder", "0s", "-"},
		{"-config", cfg, "-progress", "sometimes", "-"}} {
		if _, _, err := runReplay("", false, args...); !errors.Is(err, app.ErrUsage) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	for in, want := range map[string]string{
		`{"ts":"2026-01-02T15:00:00Z","downstream":"a"}` + "\n" + `{"ts":"2026-01-02T15:00:01Z"}`: "line 2: downstream: required",
		`{"ts":"noon","downstream":"a"}`:                                       `line 1: ts: invalid time "noon"`,
		`{"ts":1767366000,"downstream":"c"}`:                                   `line 1: unknown downstream "c"`,
		`{"ts":1767366000,"downstream":"a","tenant":"x"}`:                      `line 1: unknown field "tenant"`,
		`{"ts":1767366000,"downstream":"a","cost":0}`:                          "line 1: cost: must be at least 1, got 0",
		`{"ts":1767366000,"downstream":"a"}{"ts":1767366001,"downstream":"a"}`: "line 1: unexpected data after the JSON object at column 35",
		`{"ts":1767366000,"downstream":"a"} trailing`:                          "line 1: unexpected data after the JSON object at column 36",
		`{"ts":1767366000,"downstream":"a","ts":1767366001}`:                   "line 1: ts: set twice",
	} {
		if _, _, err := runReplay(in, false, "-config", cfg, "-"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error containing %q", in, err, want)
		}
	}
}

// Progress goes to stderr: a line at the end with -progress always when
// stderr is not a terminal; on a terminal (auto) nothing for a replay
// shorter than a second; nothing with never. What the replay does not
// model of the config is said on stderr, once per downstream.
func TestReplayProgressAndNotes(t *testing.T) {
	t.Parallel()
	cfg := replayConfig(t)
	log := `{"ts":1767366000,"downstream":"a"}` + "\n" + `{"ts":1767366001,"downstream":"b"}` + "\n"
	note := "replay: downstream b: concurrency not modelled (see docs/operations.md#shaper-replay)\n"
	for _, c := range []struct {
		progress string
		tty      bool
		want     string
	}{
		{"always", false, note + "replay: 2 lines  "},
		{"auto", true, note},
		{"auto", false, note},
		{"never", true, note},
	} {
		out, errs, err := runReplay(log, c.tty, "-config", cfg, "-progress", c.progress, "-")
		if err != nil || !strings.Contains(out, "replay of 2 arrivals") {
			t.Fatalf("-progress %s: %v\n%s", c.progress, err, out)
		}
		if !strings.HasPrefix(errs, c.want) || c.want == note && errs != note || c.progress == "always" && !strings.Contains(errs, "done in") {
			t.Errorf("-progress %s (terminal %v): stderr %q, want %q first", c.progress, c.tty, errs, c.want)
		}
	}
}
