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
	names := collectorNames(reflect.ValueOf(metrics.New(prometheus.NewRegistry())).Elem())
	sort.Strings(names)
	return names
}

// collectorNames lists the metric names of v's collector fields, and of
// the structs its pointer fields lead to (metrics.FairMetrics).
func collectorNames(v reflect.Value) []string {
	var names []string
	for i := range v.NumField() {
		f := v.Field(i)
		c, ok := f.Interface().(prometheus.Collector)
		if !ok {
			if f.Kind() == reflect.Pointer && !f.IsNil() && f.Elem().Kind() == reflect.Struct {
				names = append(names, collectorNames(f.Elem())...)
			}
			continue
		}
		_, hist := c.(*prometheus.HistogramVec)
		ch := make(chan *prometheus.Desc, 8)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			if s := fqName.FindStringSubmatch(d.String()); s != nil {
				names = append(names, s[1])
				if hist {
					names = append(names, s[1]+"_bucket", s[1]+"_sum", s[1]+"_count")
				}
			}
		}
	}
	return names
}

// RedisExporterMetrics are the redis_exporter series the alerts and the
// dashboard use (github.com/oliver006/redis_exporter).
var RedisExporterMetrics = []string{"redis_memory_used_bytes", "redis_memory_max_bytes", "redis_db_keys"}
