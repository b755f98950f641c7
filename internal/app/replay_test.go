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

func TestReplayErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "shaper.yaml")
	os.WriteFile(cfg, []byte("downstreams:\n  - {name: a, rate: 5/s, handler: {type: log}}\n  - {name: b, rate: 5/s, handler: {type: log}}\n"), 0o600)
	run := func(stdin string, args ...string) error {
		return app.Replay(context.Background(), args, strings.NewReader(stdin), &bytes.Buffer{})
	}
	if err := run("", "-config", cfg); !errors.Is(err, app.ErrUsage) {
		t.Errorf("no arrivals file: %v, want a usage error", err)
	}
	if err := run("", "x.jsonl"); !errors.Is(err, app.ErrUsage) {
		t.Errorf("no -config: %v, want a usage error", err)
	}
	for in, want := range map[string]string{
		`{"ts":"2026-01-02T15:00:00Z","downstream":"a"}` + "\n" + `{"ts":"2026-01-02T15:00:01Z"}`: "line 2: downstream: required",
		`{"ts":"noon","downstream":"a"}`:                  `line 1: ts: invalid time "noon"`,
		`{"ts":1767366000,"downstream":"c"}`:              `line 1: unknown downstream "c"`,
		`{"ts":1767366000,"downstream":"a","tenant":"x"}`: `line 1: want {"ts"`,
		`{"ts":1767366000,"downstream":"a","cost":0}`:     "line 1: cost: must be at least 1, got 0",
	} {
		if err := run(in, "-config", cfg, "-"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error containing %q", in, err, want)
		}
	}
}
