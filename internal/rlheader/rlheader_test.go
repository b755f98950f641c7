package rlheader_test

import (
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/rlheader"
	"github.com/shaper-io/shaper/internal/sizing"
)

var now = time.Unix(1_800_000_000, 0)

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// bare is ls without their Header, for tables that test the rest.
func bare(ls []rlheader.Limit) []rlheader.Limit {
	for i := range ls {
		ls[i].Header = ""
	}
	return ls
}

func TestParse(t *testing.T) {
	t.Parallel()
	s := time.Second
	for i, c := range []struct {
		h    http.Header
		want []rlheader.Limit
	}{
		{header("X-RateLimit-Limit", "100", "X-RateLimit-Remaining", "7", "X-RateLimit-Reset", "30"),
			[]rlheader.Limit{{Remaining: 7, Reset: 30 * s, Limit: 100, Source: "x-ratelimit"}}},
		// a Unix time in seconds, then in milliseconds
		{header("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1800000042"),
			[]rlheader.Limit{{Remaining: 0, Reset: 42 * s, Source: "x-ratelimit"}}},
		{header("X-RateLimit-Remaining", "5", "X-RateLimit-Reset", "1800000001500"),
			[]rlheader.Limit{{Remaining: 5, Reset: 1500 * time.Millisecond, Source: "x-ratelimit"}}},
		// a reset in the past constrains nothing; a negative remaining is 0
		// (which waits for the next second)
		{header("X-Rate-Limit-Remaining", "3", "X-Rate-Limit-Reset", "1799999000"),
			[]rlheader.Limit{{Remaining: 3, Reset: 0, Source: "x-ratelimit"}}},
		{header("X-Rate-Limit-Remaining", "-3", "X-Rate-Limit-Reset", "1799999000"),
			[]rlheader.Limit{{Remaining: 0, Reset: s, Source: "x-ratelimit"}}},
		{header("X-RateLimit-Remaining", "9", "X-RateLimit-Reset-After", "2.5", "X-RateLimit-Limit", "10, 10;w=1"),
			[]rlheader.Limit{{Remaining: 9, Reset: 2500 * time.Millisecond, Limit: 10, Source: "x-ratelimit"}}},
		// draft 07: a dictionary
		{header("RateLimit", "limit=100, remaining=50, reset=5"),
			[]rlheader.Limit{{Remaining: 50, Reset: 5 * s, Limit: 100, Source: "ratelimit"}}},
		// draft 08 on: items with r and t, limits from the policy by name
		{header("RateLimit", `"burst";r=2;t=1, "day";r=900;t=3600`, "RateLimit-Policy", `"burst";q=10;w=1, "day";q=1000;w=86400`),
			[]rlheader.Limit{{Remaining: 2, Reset: s, Limit: 10, Window: s, Source: "ratelimit"},
				{Remaining: 900, Reset: 3600 * s, Limit: 1000, Window: 86400 * s, Source: "ratelimit"}}},
		// drafts 00-06: three fields
		{header("RateLimit-Limit", "60", "RateLimit-Remaining", "1", "RateLimit-Reset", "20"),
			[]rlheader.Limit{{Remaining: 1, Reset: 20 * s, Limit: 60, Source: "ratelimit"}}},
		// Retry-After, seconds or a date; huge is bounded
		{header("Retry-After", "120"), []rlheader.Limit{{Reset: 120 * s, Source: "retry-after"}}},
		{header("Retry-After", now.Add(90*s).UTC().Format(http.TimeFormat)), []rlheader.Limit{{Reset: 90 * s, Source: "retry-after"}}},
		{header("Retry-After", "1e300"), []rlheader.Limit{{Reset: sizing.MaxInterval, Source: "retry-after"}}},
		// malformed: nothing
		{header("X-RateLimit-Remaining", "lots", "X-RateLimit-Reset", "10", "RateLimit", "remaining=;reset=x",
			"Retry-After", "soon", "RateLimit-Remaining", "NaN", "RateLimit-Reset", "1"), nil},
		{header("X-RateLimit-Remaining", "1e30", "X-RateLimit-Reset", "Inf"), nil},
	} {
		if got := bare(rlheader.Parse(c.h, now)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("step %d: Parse(%v) = %+v, want %+v", i, c.h, got, c.want)
		}
	}
}

func TestBinding(t *testing.T) {
	t.Parallel()
	s := time.Second
	for i, c := range []struct {
		in   []rlheader.Limit
		want rlheader.Limit
		ok   bool
	}{
		{nil, rlheader.Limit{}, false},
		{[]rlheader.Limit{{Remaining: 5, Reset: 0}}, rlheader.Limit{}, false},
		// the fewest units per second left
		{[]rlheader.Limit{{Remaining: 19, Reset: s}, {Remaining: 4000, Reset: 3000 * s}},
			rlheader.Limit{Remaining: 4000, Reset: 3000 * s}, true},
		// nothing left beats any pace; of two, the later reset
		{[]rlheader.Limit{{Remaining: 1, Reset: 100 * s}, {Remaining: 0, Reset: 2 * s}, {Remaining: 0, Reset: 5 * s}},
			rlheader.Limit{Remaining: 0, Reset: 5 * s}, true},
	} {
		got, ok := rlheader.Binding(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("step %d: Binding = %+v, %v; want %+v, %v", i, got, ok, c.want, c.ok)
		}
	}
}
