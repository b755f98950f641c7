package replay

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shaper-io/shaper/internal/plan"
)

// Summary is one downstream's totals.
type Summary struct {
	Downstream string `json:"downstream"`
	Arrivals   int    `json:"arrivals"`
	Admitted   int    `json:"admitted"`
	Deferred   int    `json:"deferred"`
	Rejected   int    `json:"rejected"`
	Invalid    int    `json:"invalid,omitempty"`
	// RejectedBy counts rejections (and deferrals) by the enforced
	// limiter that made them.
	RejectedBy map[string]int `json:"rejected_by,omitempty"`
	// ShadowRejected counts, per limiter in shadow, the arrivals it would
	// have rejected (or deferred).
	ShadowRejected map[string]int `json:"shadow_rejected,omitempty"`
	// Quotas are the downstream's quotas, applied (as Quota.String());
	// HeldBy counts the tasks whose slot one of them moved later, by
	// quota.
	Quotas []string       `json:"quotas,omitempty"`
	HeldBy map[string]int `json:"held_by,omitempty"`
	// Wait is the shaping wait of the admitted and deferred tasks.
	Wait Stats `json:"wait"`
	// First and Last are the first arrival and the last slot.
	First time.Time `json:"first_arrival"`
	Last  time.Time `json:"last_start"`

	waits waitHist
}

// Stats are wait statistics in seconds. Count, Mean and Max are exact;
// the percentiles are within 0.05% (waits are counted at four
// significant digits, so that a log of any length is summarised in
// bounded memory).
type Stats struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean_seconds"`
	P50   float64 `json:"p50_seconds"`
	P90   float64 `json:"p90_seconds"`
	P99   float64 `json:"p99_seconds"`
	Max   float64 `json:"max_seconds"`
}

// summaries totals decisions per downstream as they come.
type summaries struct {
	pl *plan.Plan
	by map[string]*Summary
	n  int
}

func newSummaries(pl *plan.Plan) *summaries {
	return &summaries{pl: pl, by: map[string]*Summary{}}
}

func (ss *summaries) add(d *Decision) {
	ss.n++
	s := ss.by[d.Downstream]
	if s == nil {
		s = &Summary{Downstream: d.Downstream, RejectedBy: map[string]int{}, ShadowRejected: map[string]int{},
			HeldBy: map[string]int{}, First: d.TS}
		if pd, ok := ss.pl.Downstream(d.Downstream); ok {
			for _, q := range pd.Shaping.Quotas {
				s.Quotas = append(s.Quotas, q.String())
			}
		}
		ss.by[d.Downstream] = s
	}
	s.Arrivals++
	if d.TS.Before(s.First) {
		s.First = d.TS
	}
	switch d.Outcome {
	case Admitted:
		s.Admitted++
	case Deferred:
		s.Deferred++
		s.RejectedBy[d.Limiter]++
	case Rejected:
		s.Rejected++
		s.RejectedBy[d.Limiter]++
	case Invalid:
		s.Invalid++
	}
	for _, l := range d.ShadowRejected {
		s.ShadowRejected[l]++
	}
	if d.HeldBy != "" {
		s.HeldBy[d.HeldBy]++
	}
	if d.WaitSeconds != nil {
		s.waits.add(*d.WaitSeconds)
		if d.Start.After(s.Last) {
			s.Last = *d.Start
		}
	}
}

// list is the summaries in the plan's order.
func (ss *summaries) list() []Summary {
	var out []Summary
	for _, pd := range ss.pl.Downstreams {
		if s := ss.by[pd.Shaping.Name]; s != nil {
			s.Wait = s.waits.stats()
			out = append(out, *s)
		}
	}
	return out
}

// waitHist counts waits by their microseconds rounded to four
// significant digits: at most 9,000 buckets a decade, whatever the
// number of waits.
type waitHist struct {
	n        int
	sum, max float64
	buckets  map[int64]int
}

func (h *waitHist) add(w float64) {
	if h.buckets == nil {
		h.buckets = map[int64]int{}
	}
	h.n++
	h.sum += w
	h.max = max(h.max, w)
	h.buckets[round4(int64(math.Round(w*1e6)))]++
}

// round4 rounds us to four significant digits.
func round4(us int64) int64 {
	p := int64(1)
	for us/p >= 10000 {
		p *= 10
	}
	return (us + p/2) / p * p
}

func (h *waitHist) stats() Stats {
	if h.n == 0 {
		return Stats{}
	}
	keys := make([]int64, 0, len(h.buckets))
	for k := range h.buckets {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	q := func(p float64) float64 {
		rank := min(max(int(math.Ceil(p*float64(h.n))), 1), h.n)
		seen := 0
		for _, k := range keys {
			if seen += h.buckets[k]; seen >= rank {
				return min(float64(k)/1e6, h.max)
			}
		}
		return h.max
	}
	return Stats{Count: h.n, Mean: h.sum / float64(h.n), P50: q(0.5), P90: q(0.9), P99: q(0.99), Max: h.max}
}

// Write prints summaries for a person.
func Write(w io.Writer, pl *plan.Plan, sums []Summary) {
	for _, s := range sums {
		pd, _ := pl.Downstream(s.Downstream)
		quotas := ""
		if len(s.Quotas) > 0 {
			quotas = ", quotas " + strings.Join(s.Quotas, " and ")
		}
		fmt.Fprintf(w, "downstream %s (rate %s%s): %d arrivals from %s to %s\n", s.Downstream, pd.Written.Rate, quotas, s.Arrivals,
			s.First.UTC().Format(time.RFC3339Nano), s.Last.UTC().Format(time.RFC3339Nano))
		fmt.Fprintf(w, "  admitted %d · deferred %d · rejected %d", s.Admitted, s.Deferred, s.Rejected)
		if s.Invalid > 0 {
			fmt.Fprintf(w, " · invalid %d", s.Invalid)
		}
		if len(s.RejectedBy) > 0 {
			fmt.Fprintf(w, " (%s)", counts(s.RejectedBy))
		}
		fmt.Fprintln(w)
		if len(s.ShadowRejected) > 0 {
			fmt.Fprintf(w, "  in shadow, would have rejected: %s\n", counts(s.ShadowRejected))
		}
		if len(s.HeldBy) > 0 {
			fmt.Fprintf(w, "  slots moved later by: %s\n", counts(s.HeldBy))
		}
		if st := s.Wait; st.Count > 0 {
			fmt.Fprintf(w, "  shaping wait of %d tasks: mean %s · p50 %s · p90 %s · p99 %s · max %s; last slot %s\n", st.Count,
				secs(st.Mean), secs(st.P50), secs(st.P90), secs(st.P99), secs(st.Max), s.Last.UTC().Format(time.RFC3339Nano))
		}
	}
}

func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + " " + strconv.Itoa(m[k])
	}
	return strings.Join(parts, ", ")
}

func secs(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}
