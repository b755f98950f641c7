// Package docscheck holds no code: its tests check that docs/ agrees with
// the code — the Grafana dashboard and the alert rules name only metrics
// that internal/metrics defines and parse (promtool), the docs' metric names
// exist, and the commands' --help lists the flags the docs describe.
package docscheck

import (
	"reflect"
	"regexp"
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaper-io/shaper/internal/metrics"
)

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// MetricNames lists every series name shaper exports, histograms with
// their _bucket, _sum and _count series.
func MetricNames() []string {
	m := metrics.New(prometheus.NewRegistry())
	ch := make(chan *prometheus.Desc, 8)
	var names []string
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		c, ok := v.Field(i).Interface().(prometheus.Collector)
		if !ok {
			continue
		}
		_, hist := c.(*prometheus.HistogramVec)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			if s := fqName.FindStringSubmatch(d.String()); s != nil {
				names = append(names, s[1])
				if hist {
					names = append(names, s[1]+"_bucket", s[1]+"_sum", s[1]+"_count")
				}
			}
		}
		ch = make(chan *prometheus.Desc, 8)
	}
	sort.Strings(names)
	return names
}

// RedisExporterMetrics are the redis_exporter series the alerts and the
// dashboard use (github.com/oliver006/redis_exporter).
var RedisExporterMetrics = []string{"redis_memory_used_bytes", "redis_memory_max_bytes", "redis_db_keys"}
