// Package replay answers "what would this config have done with that
// traffic?": it runs a log of past arrivals through a config's admission
// limiters and shaping buckets, offline, with the real Lua scripts at
// each arrival's own time (the scripts' explicit now), and reports what
// would have been admitted, deferred and rejected, and how long the
// admitted tasks would have waited for their slots. `shaper replay` runs
// it on the embedded Redis; nothing is enqueued and nothing is sent.
//
// The arrival log is JSON Lines, one arrival a line:
//
//	{"ts": "2026-01-02T15:04:05.120Z", "downstream": "api", "key": "tenant-7", "cost": 1}
//
// ts is RFC 3339 or Unix seconds (a number or a string); downstream may be
// left out when the config has one; key defaults to "" and cost to 1.
//
// The model is the one shaper runs: admission decides at arrival (a
// rejection under on_reject: defer becomes a task ready at its
// Retry-After, rounded up to a whole second as the producer does); every
// admitted or deferred task then takes the next slot of its downstream's
// bucket at the time it is ready, in that order (FIFO), so its wait is the
// time it would have spent in the queue and the bucket together. Limiters
// in shadow mode are decided and charged like the others and reported
// apart. Runtime overrides (shaper ctl) and concurrency caps are not
// modelled; a rate schedule is.
package replay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/clock"
	"github.com/shaper-io/shaper/internal/plan"
	"github.com/shaper-io/shaper/internal/sizing"
	"github.com/shaper-io/shaper/internal/taskspec"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// Arrival is one line of the log.
type Arrival struct {
	// Line is the line number in the log (1-based).
	Line       int
	TS         time.Time
	Downstream string
	Key        string
	Cost       int64
}

// The outcomes of an arrival.
const (
	Admitted = "admitted"
	Deferred = "deferred"
	Rejected = "rejected"
	Invalid  = "invalid" // a cost no limiter or bucket could ever take
)

// Decision is what became of one arrival.
type Decision struct {
	Line       int       `json:"line"`
	TS         time.Time `json:"ts"`
	Downstream string    `json:"downstream"`
	Key        string    `json:"key,omitempty"`
	Cost       int64     `json:"cost"`
	// Outcome is admitted, deferred, rejected or invalid.
	Outcome string `json:"outcome"`
	// Limiter is the enforced limiter that rejected (or deferred) it.
	Limiter string `json:"limiter,omitempty"`
	// RetryAfterSeconds is that limiter's Retry-After.
	RetryAfterSeconds float64 `json:"retry_after_seconds,omitempty"`
	// ShadowRejected names the limiters in shadow that would have
	// rejected it.
	ShadowRejected []string `json:"shadow_rejected,omitempty"`
	// WaitSeconds is, for an admitted or deferred task, the wait from
	// when it was ready (its arrival, or its Retry-After) to its slot.
	WaitSeconds *float64 `json:"wait_seconds,omitempty"`
	// Start is when its slot starts.
	Start *time.Time `json:"start,omitempty"`
	// Error says why an arrival is invalid.
	Error string `json:"error,omitempty"`

	ready time.Time
}

// Parse reads an arrival log. def is the downstream of lines that name
// none ("" when the config has several: such a line is an error). Errors
// name the line.
func Parse(r io.Reader, def string) ([]Arrival, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var out []Arrival
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		a, err := parseLine(line, def)
		if err != nil {
			return nil, fmt.Errorf("replay: line %d: %w", n, err)
		}
		a.Line = n
		out = append(out, a)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("replay: reading the arrivals: %w", err)
	}
	return out, nil
}

func parseLine(line []byte, def string) (Arrival, error) {
	var raw struct {
		TS         json.RawMessage `json:"ts"`
		Downstream *string         `json:"downstream"`
		Key        string          `json:"key"`
		Cost       *int64          `json:"cost"`
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return Arrival{}, fmt.Errorf("want {\"ts\": …, \"downstream\": …, \"key\": …, \"cost\": …}: %v", err)
	}
	a := Arrival{Downstream: def, Key: raw.Key, Cost: 1}
	if len(raw.TS) == 0 {
		return a, errors.New("ts: required (RFC 3339 or Unix seconds)")
	}
	ts := strings.Trim(string(raw.TS), `"`)
	t, err := taskspec.ParseAt(ts)
	if err != nil {
		return a, fmt.Errorf("ts: %v", err)
	}
	a.TS = t
	if raw.Downstream != nil {
		a.Downstream = *raw.Downstream
	}
	if a.Downstream == "" {
		return a, errors.New("downstream: required (the config has several)")
	}
	if raw.Cost != nil {
		if *raw.Cost < 1 {
			return a, fmt.Errorf("cost: must be at least 1, got %d", *raw.Cost)
		}
		a.Cost = *raw.Cost
	}
	return a, nil
}

// Run replays arrivals (in time order; ties keep the log's order) through
// pl's admission and shaping on rdb, which it writes to: give it a Redis
// of its own (the embedded one). The decisions come back in the log's
// order.
func Run(ctx context.Context, rdb redis.UniversalClient, pl *plan.Plan, arrivals []Arrival) ([]Decision, error) {
	sort.SliceStable(arrivals, func(i, j int) bool { return arrivals[i].TS.Before(arrivals[j].TS) })
	now := &arrivalClock{}
	adm, err := pl.NewAdmissionAt(rdb, nil, now)
	if err != nil {
		return nil, err
	}
	out := make([]Decision, len(arrivals))
	for i, a := range arrivals {
		pd, ok := pl.Downstream(a.Downstream)
		if !ok {
			return nil, fmt.Errorf("replay: line %d: unknown downstream %q", a.Line, a.Downstream)
		}
		now.t = a.TS
		out[i] = admit(ctx, a, adm[a.Downstream], pd)
	}
	if err := shape(ctx, rdb, pl, out); err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Line < out[j].Line })
	return out, nil
}

// arrivalClock is the time of the arrival being decided: the limiters'
// explicit now. Replay sets no timers; NewTimer is the real clock's.
type arrivalClock struct{ t time.Time }

func (c *arrivalClock) Now() time.Time { return c.t }

func (c *arrivalClock) NewTimer(d time.Duration) clock.Timer { return clock.Real{}.NewTimer(d) }

// admit decides one arrival at its time, as queue.Producer does.
func admit(ctx context.Context, a Arrival, adm queue.Admission, pd *plan.Downstream) Decision {
	d := Decision{Line: a.Line, TS: a.TS, Downstream: a.Downstream, Key: a.Key, Cost: a.Cost, Outcome: Admitted, ready: a.TS}
	if mc := pd.Shaping.MaxCost; mc > 0 && a.Cost > mc {
		d.Outcome, d.Error = Invalid, fmt.Sprintf("cost %d exceeds the max cost %d of downstream %q", a.Cost, mc, a.Downstream)
		return d
	}
	if adm.Limiter == nil {
		return d
	}
	res, err := adm.Limiter.Allow(ctx, a.Key, a.Cost)
	for _, s := range res.Shadow {
		if s.Outcome() == "rejected" {
			d.ShadowRejected = append(d.ShadowRejected, s.Name)
		}
	}
	switch {
	case errors.Is(err, limiters.ErrCostExceedsCapacity):
		d.Outcome, d.Error = Invalid, err.Error()
	case err != nil:
		d.Outcome, d.Error, d.Limiter = Rejected, err.Error(), res.Name // fail_closed on an error of the replay's Redis
	case res.Allowed:
	case adm.OnReject == queue.Defer:
		d.Outcome, d.Limiter, d.RetryAfterSeconds = Deferred, res.Name, res.RetryAfter.Seconds()
		at := a.TS.Add(res.RetryAfter) // whole seconds, rounded up, as the producer schedules it
		if s := at.Truncate(time.Second); !s.Equal(at) {
			at = s.Add(time.Second)
		}
		d.ready = at
	default:
		d.Outcome, d.Limiter, d.RetryAfterSeconds = Rejected, res.Name, res.RetryAfter.Seconds()
	}
	return d
}

// shape gives every admitted and deferred task its slot, in the order
// they are ready, each reserved at its ready time with no bound on the
// wait (the queue in front of the bucket).
func shape(ctx context.Context, rdb redis.UniversalClient, pl *plan.Plan, ds []Decision) error {
	idx := make([]int, 0, len(ds))
	for i := range ds {
		if ds[i].Outcome == Admitted || ds[i].Outcome == Deferred {
			idx = append(idx, i)
		}
	}
	sort.SliceStable(idx, func(a, b int) bool { return ds[idx[a]].ready.Before(ds[idx[b]].ready) })
	buckets := shaping.NewBuckets(rdb, pl.Prefix)
	for _, i := range idx {
		d := &ds[i]
		pd, _ := pl.Downstream(d.Downstream)
		rate := pd.Shaping.Rate
		if l, _, ok := pd.Shaping.Schedule.At(d.ready); ok {
			rate = l
		}
		b := shaping.Bucket{Name: d.Downstream, Rate: rate, Burst: pd.Shaping.Burst, MaxCost: pd.Shaping.MaxCost,
			LateTolerance: paceTolerance(pd.Shaping, rate)}
		res, err := buckets.ReserveAt(ctx, d.ready, b, d.Cost, -1)
		if err != nil {
			return fmt.Errorf("replay: line %d: %w", d.Line, err)
		}
		w := res.Wait.Seconds()
		start := d.ready.Add(res.Wait)
		d.WaitSeconds, d.Start = &w, &start
	}
	return nil
}

// paceTolerance is the late tolerance the dispatcher paces ds's bucket
// with (its spacing slack), as the runner computes it.
func paceTolerance(ds shaping.Downstream, rate limiters.Limit) time.Duration {
	if ds.LateTolerance != 0 {
		return max(ds.LateTolerance, 0)
	}
	return sizing.LateTolerance(rate, 1)
}

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
	// Wait is the shaping wait of the admitted and deferred tasks.
	Wait Stats `json:"wait"`
	// First and Last are the first arrival and the last slot.
	First time.Time `json:"first_arrival"`
	Last  time.Time `json:"last_start"`
}

// Stats are wait statistics in seconds.
type Stats struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean_seconds"`
	P50   float64 `json:"p50_seconds"`
	P90   float64 `json:"p90_seconds"`
	P99   float64 `json:"p99_seconds"`
	Max   float64 `json:"max_seconds"`
}

// Summarize totals decisions per downstream, in the plan's order.
func Summarize(pl *plan.Plan, ds []Decision) []Summary {
	by := map[string]*Summary{}
	waits := map[string][]float64{}
	for _, d := range ds {
		s := by[d.Downstream]
		if s == nil {
			s = &Summary{Downstream: d.Downstream, RejectedBy: map[string]int{}, ShadowRejected: map[string]int{}, First: d.TS}
			by[d.Downstream] = s
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
		if d.WaitSeconds != nil {
			waits[d.Downstream] = append(waits[d.Downstream], *d.WaitSeconds)
			if d.Start.After(s.Last) {
				s.Last = *d.Start
			}
		}
	}
	var out []Summary
	for _, pd := range pl.Downstreams {
		if s := by[pd.Shaping.Name]; s != nil {
			s.Wait = stats(waits[s.Downstream])
			out = append(out, *s)
		}
	}
	return out
}

func stats(v []float64) Stats {
	if len(v) == 0 {
		return Stats{}
	}
	sort.Float64s(v)
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	q := func(p float64) float64 { return v[min(int(math.Ceil(p*float64(len(v))))-1, len(v)-1)] }
	return Stats{Count: len(v), Mean: sum / float64(len(v)), P50: q(0.5), P90: q(0.9), P99: q(0.99), Max: v[len(v)-1]}
}

// Write prints summaries for a person.
func Write(w io.Writer, pl *plan.Plan, sums []Summary) {
	for _, s := range sums {
		pd, _ := pl.Downstream(s.Downstream)
		fmt.Fprintf(w, "downstream %s (rate %s): %d arrivals from %s to %s\n", s.Downstream, pd.Written.Rate, s.Arrivals,
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
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + " " + strconv.Itoa(m[k])
	}
	return strings.Join(parts, ", ")
}

func secs(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}
