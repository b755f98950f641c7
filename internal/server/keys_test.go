package server

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaper-io/shaper/internal/metrics"
)

// /metrics serves the series labelled with a tenant key only under
// MetricsKeys, and then, when a token is configured, only to a request
// with it; every other series is served to every request.
func TestMetricsKeys(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		token       string
		metricsKeys bool
		auth        string
		want        bool
	}{
		{"s3cret", true, "Bearer s3cret", true},
		{"s3cret", true, "bearer s3cret", true},
		{"s3cret", true, "", false},
		{"s3cret", true, "Bearer wrong", false},
		{"s3cret", false, "Bearer s3cret", false},
		{"", true, "", true},
		{"", false, "", false},
	} {
		reg := prometheus.NewRegistry()
		m := metrics.New(reg)
		m.Fair.KeyReleases.WithLabelValues("api", "acme-tenant").Set(4)
		m.Fair.Jain.WithLabelValues("api").Set(1)
		s := New(Options{Addr: "127.0.0.1:0", Token: c.token, MetricsKeys: c.metricsKeys, Registry: reg})
		addr, err := s.Start()
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		s.Shutdown(t.Context())
		got := strings.Contains(string(body), `shaper_fair_key_releases{downstream="api",key="acme-tenant"} 4`)
		if resp.StatusCode != 200 || got != c.want || !strings.Contains(string(body), `shaper_fair_jain_index{downstream="api"} 1`) {
			t.Errorf("token %q, metrics_keys %v, Authorization %q: %d, key series served %v, want 200, %v and the other series",
				c.token, c.metricsKeys, c.auth, resp.StatusCode, got, c.want)
		}
	}
}
