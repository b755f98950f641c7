package config_test

import (
	"os"
	"strings"
	"testing"

	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/redistest"
)

// FuzzParse: any bytes give a config that validates, or one readable line.
func FuzzParse(f *testing.F) {
	for _, s := range parseSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(parseInput)
}

// TestParseMutations runs FuzzParse's body on 3000 mutations of its
// corpus, as `go test -fuzz FuzzParse -fuzztime 3000x` would, in the normal
// test run (see redistest.Mutations).
func TestParseMutations(t *testing.T) {
	var seeds [][]any
	for _, s := range parseSeeds(t) {
		seeds = append(seeds, []any{s})
	}
	redistest.EachMutation(t, "FuzzParse", 1, 3000, seeds, func(in []any) { parseInput(t, in[0].([]byte)) })
}

// parseSeeds are FuzzParse's seeds.
func parseSeeds(tb testing.TB) [][]byte {
	example, err := os.ReadFile("testdata/example.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	return [][]byte{
		example,
		[]byte("downstreams: [{name: a, rate: 1/s, handler: {type: log}}]"),
		[]byte("redis: {url: \"rediss://u@h:1/2\"}\ndownstreams: [{name: a, rate: 2.5/s, capacity: 3, handler: {type: http, url: \"http://x\"}, admission: {limiters: [{algorithm: sliding_log, rate: 3/m}]}}]"),
		[]byte("cron: [{name: x, schedule: \"@every 1s\", downstream: a}]\ndownstreams: [{name: a, rate: 1/s, schedule: [{cron: \"0 8 * * *\", rate: 5/s}], handler: {type: log}}]"),
	}
}

// parseInput is FuzzParse's body.
func parseInput(t *testing.T, data []byte) {
	c, err := config.Parse(data)
	if err != nil {
		if msg := err.Error(); strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "config: ") {
			t.Fatalf("error is not one line starting with \"config: \": %q", msg)
		}
		return
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Parse accepted a config that Validate rejects: %v", err)
	}
}
