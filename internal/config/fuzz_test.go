package config_test

import (
	"os"
	"strings"
	"testing"

	"github.com/shaper-io/shaper/internal/config"
)

// FuzzParse: any bytes give a config that validates, or one readable line.
func FuzzParse(f *testing.F) {
	example, err := os.ReadFile("testdata/example.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	f.Add([]byte("downstreams: [{name: a, rate: 1/s, handler: {type: log}}]"))
	f.Add([]byte("redis: {url: \"rediss://u@h:1/2\"}\ndownstreams: [{name: a, rate: 2.5/s, capacity: 3, handler: {type: http, url: \"http://x\"}, admission: {limiters: [{algorithm: sliding_log, rate: 3/m}]}}]"))
	f.Add([]byte("cron: [{name: x, schedule: \"@every 1s\", downstream: a}]\ndownstreams: [{name: a, rate: 1/s, schedule: [{cron: \"0 8 * * *\", rate: 5/s}], handler: {type: log}}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
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
	})
}
