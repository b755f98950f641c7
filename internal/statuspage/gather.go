package statuspage

import (
	"math"
	"sort"

	dto "github.com/prometheus/client_model/go"
)

// families indexes one Gather by metric name.
type families map[string]*dto.MetricFamily

func index(mfs []*dto.MetricFamily) families {
	f := make(families, len(mfs))
	for _, mf := range mfs {
		f[mf.GetName()] = mf
	}
	return f
}

// match reports whether m carries every label in want.
func match(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}

// value is the counter or gauge value of the series of name with the given
// labels (summed over the labels not given), and whether any series
// matched.
func (f families) value(name string, labels map[string]string) (float64, bool) {
	mf, ok := f[name]
	if !ok {
		return 0, false
	}
	sum, found := 0.0, false
	for _, m := range mf.GetMetric() {
		if !match(m, labels) {
			continue
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum, found
}

// counter is value without the found flag: a series not created yet counts 0.
func (f families) counter(name string, labels map[string]string) float64 {
	v, _ := f.value(name, labels)
	return v
}

// labelValues lists the values of label over the series of name that carry
// the labels given, sorted.
func (f families) labelValues(name, label string, labels map[string]string) []string {
	mf, ok := f[name]
	if !ok {
		return nil
	}
	seen := map[string]bool{}
	for _, m := range mf.GetMetric() {
		if !match(m, labels) {
			continue
		}
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				seen[lp.GetValue()] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// hist is a histogram's state: cumulative counts per upper bound (the
// last bound is +Inf), the sum and the count.
type hist struct {
	bounds []float64
	counts []float64
	sum    float64
	count  float64
}

// histogram is the histogram series of name with the given labels (summed
// over the labels not given).
func (f families) histogram(name string, labels map[string]string) hist {
	var h hist
	mf, ok := f[name]
	if !ok {
		return h
	}
	for _, m := range mf.GetMetric() {
		if !match(m, labels) || m.Histogram == nil {
			continue
		}
		mh := m.GetHistogram()
		if h.bounds == nil {
			for _, b := range mh.GetBucket() {
				h.bounds = append(h.bounds, b.GetUpperBound())
			}
			h.bounds = append(h.bounds, math.Inf(1))
			h.counts = make([]float64, len(h.bounds))
		}
		for i, b := range mh.GetBucket() {
			if i < len(h.counts)-1 {
				h.counts[i] += float64(b.GetCumulativeCount())
			}
		}
		h.counts[len(h.counts)-1] += float64(mh.GetSampleCount())
		h.sum += mh.GetSampleSum()
		h.count += float64(mh.GetSampleCount())
	}
	return h
}

// minus is h − old, the observations made between the two (old may be the
// zero hist: no earlier state).
func (h hist) minus(old hist) hist {
	d := hist{bounds: h.bounds, sum: h.sum - old.sum, count: h.count - old.count}
	d.counts = make([]float64, len(h.counts))
	for i := range h.counts {
		d.counts[i] = h.counts[i]
		if i < len(old.counts) {
			d.counts[i] -= old.counts[i]
		}
	}
	return d
}

// quantile estimates the q-quantile as Prometheus's histogram_quantile
// does: linear interpolation inside the bucket that holds it, the first
// bucket starting at 0, and the highest finite bound when it falls in the
// +Inf bucket. ok is false without observations.
func (h hist) quantile(q float64) (v float64, ok bool) {
	if h.count <= 0 || len(h.bounds) < 2 {
		return 0, false
	}
	rank := q * h.count
	for i, c := range h.counts {
		if c < rank {
			continue
		}
		if math.IsInf(h.bounds[i], 1) {
			return h.bounds[len(h.bounds)-2], true
		}
		lo, below := 0.0, 0.0
		if i > 0 {
			lo, below = h.bounds[i-1], h.counts[i-1]
		}
		if c == below {
			return h.bounds[i], true
		}
		return lo + (h.bounds[i]-lo)*(rank-below)/(c-below), true
	}
	return h.bounds[len(h.bounds)-2], true
}

// mean is sum/count, ok false without observations.
func (h hist) mean() (float64, bool) {
	if h.count <= 0 {
		return 0, false
	}
	return h.sum / h.count, true
}
