package rlheader_test

import (
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/rlheader"
	"github.com/shaper-io/shaper/internal/sizing"
)

// parseCase is one header and the limits Parse reads from it at now
// (Header left out: TestHeaderField tests it).
type parseCase struct {
	name string
	h    http.Header
	now  time.Time // zero: now
	want []rlheader.Limit
}

func runParse(t *testing.T, cs []parseCase) {
	t.Helper()
	for _, c := range cs {
		at := c.now
		if at.IsZero() {
			at = now
		}
		if got := bare(rlheader.Parse(c.h, at)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: Parse(%v) = %+v, want %+v", c.name, c.h, got, c.want)
		}
	}
}

const s = time.Second

// date is t as an HTTP date.
func date(t time.Time) string { return t.UTC().Format(http.TimeFormat) }

// Class 1: the unprefixed RateLimit-Reset of drafts 00-06 may be a Unix
// time, told apart by size as X-RateLimit-Reset's is.
func TestEpochRateLimitReset(t *testing.T) {
	t.Parallel()
	runParse(t, []parseCase{
		{"gitlab", header("RateLimit-Limit", "600", "RateLimit-Remaining", "0", "RateLimit-Reset", "1800000030", "Retry-After", "30"),
			time.Time{}, []rlheader.Limit{{Remaining: 0, Reset: 30 * s, Limit: 600, Source: "ratelimit"}, {Reset: 30 * s, Source: "retry-after"}}},
		{"milliseconds", header("RateLimit-Remaining", "4", "RateLimit-Reset", "1800000002500"),
			time.Time{}, []rlheader.Limit{{Remaining: 4, Reset: 2500 * time.Millisecond, Source: "ratelimit"}}},
		{"delay below 1e9 stays a delay", header("RateLimit-Remaining", "4", "RateLimit-Reset", "999999999"),
			time.Time{}, []rlheader.Limit{{Remaining: 4, Reset: sizing.MaxInterval, Source: "ratelimit"}}},
		{"epoch in the past", header("RateLimit-Remaining", "3", "RateLimit-Reset", "1799999990"),
			time.Time{}, []rlheader.Limit{{Remaining: 3, Reset: 0, Source: "ratelimit"}}},
		{"rfc 3339", header("RateLimit-Remaining", "1", "RateLimit-Reset", "2027-01-15T08:00:45Z"),
			time.Time{}, []rlheader.Limit{{Remaining: 1, Reset: 45 * s, Source: "ratelimit"}}},
	})
}

// Class 2: nothing left with a reset below a second waits until the next
// whole second of now at least; with units left, a reset of 0 still
// constrains nothing.
func TestZeroResetNothingLeft(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	frac := now.Add(300 * ms)
	runParse(t, []parseCase{
		{"reddit", header("X-Ratelimit-Used", "100", "X-Ratelimit-Remaining", "0.0", "X-Ratelimit-Reset", "0"),
			frac, []rlheader.Limit{{Remaining: 0, Reset: 700 * ms, Source: "x-ratelimit"}}},
		{"on a whole second", header("X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "0"),
			time.Time{}, []rlheader.Limit{{Remaining: 0, Reset: s, Source: "x-ratelimit"}}},
		{"sub-second below the next second", header("X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "0.2"),
			frac, []rlheader.Limit{{Remaining: 0, Reset: 700 * ms, Source: "x-ratelimit"}}},
		{"sub-second past the next second", header("X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "0.9"),
			frac, []rlheader.Limit{{Remaining: 0, Reset: 900 * ms, Source: "x-ratelimit"}}},
		{"draft 08", header("RateLimit", `"x";r=0;t=0`),
			time.Time{}, []rlheader.Limit{{Remaining: 0, Reset: s, Source: "ratelimit"}}},
		{"retry-after 0", header("Retry-After", "0"),
			frac, []rlheader.Limit{{Reset: 700 * ms, Source: "retry-after"}}},
		{"units left: no constraint", header("X-Ratelimit-Remaining", "5", "X-Ratelimit-Reset", "0"),
			frac, []rlheader.Limit{{Remaining: 5, Reset: 0, Source: "x-ratelimit"}}},
	})
	l, ok := rlheader.Binding(rlheader.Parse(header("X-Ratelimit-Remaining", "0.0", "X-Ratelimit-Reset", "0"), frac))
	if !ok || l.Remaining != 0 || l.Reset != 700*ms {
		t.Errorf("reddit: Binding = %+v, %v; want a 700ms hold", l, ok)
	}
}

// Class 3: a delay beats an absolute time, and an absolute time is placed
// on the Date header's clock, not the local one.
func TestRelativeResetAndServerClock(t *testing.T) {
	t.Parallel()
	server := now.Add(-2 * s) // the local clock is 2s ahead
	runParse(t, []parseCase{
		{"discord: reset-after wins", header("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1799999999.5",
			"X-RateLimit-Reset-After", "1.5"), time.Time{}, []rlheader.Limit{{Remaining: 0, Reset: 1500 * time.Millisecond, Source: "x-ratelimit"}}},
		{"reset-after unreadable: reset", header("X-RateLimit-Remaining", "2", "X-RateLimit-Reset", "1800000009",
			"X-RateLimit-Reset-After", "soon"), time.Time{}, []rlheader.Limit{{Remaining: 2, Reset: 9 * s, Source: "x-ratelimit"}}},
		{"epoch at local now, 2s on the Date clock", header("Date", date(server), "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1800000000"),
			time.Time{}, []rlheader.Limit{{Remaining: 0, Reset: 2 * s, Source: "x-ratelimit"}}},
		{"epoch 30s after Date", header("Date", date(server), "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1800000028"),
			time.Time{}, []rlheader.Limit{{Remaining: 0, Reset: 30 * s, Source: "x-ratelimit"}}},
		{"epoch ms after Date", header("Date", date(server), "X-Rate-Limit-Remaining", "1", "X-Rate-Limit-Reset", "1800000003000"),
			time.Time{}, []rlheader.Limit{{Remaining: 1, Reset: 5 * s, Source: "x-ratelimit"}}},
		{"retry-after date after Date", header("Date", date(now.Add(5*s)), "Retry-After", date(now.Add(65*s))),
			time.Time{}, []rlheader.Limit{{Reset: 60 * s, Source: "retry-after"}}},
		{"iso after Date", header("Date", date(server), "RateLimit-Remaining", "0", "RateLimit-Reset", "2027-01-15T08:00:28Z"),
			time.Time{}, []rlheader.Limit{{Remaining: 0, Reset: 30 * s, Source: "ratelimit"}}},
		{"delay ignores Date", header("Date", date(server), "Retry-After", "30"),
			time.Time{}, []rlheader.Limit{{Reset: 30 * s, Source: "retry-after"}}},
		{"unreadable Date: now", header("Date", "yesterday", "Retry-After", date(now.Add(40*s))),
			time.Time{}, []rlheader.Limit{{Reset: 40 * s, Source: "retry-after"}}},
	})
}

// Class 4: a repeated or comma-folded field reads its strictest member.
func TestRepeatedHeadersStrictest(t *testing.T) {
	t.Parallel()
	runParse(t, []parseCase{
		{"remaining twice", header("X-RateLimit-Remaining", "5", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "10"),
			time.Time{}, []rlheader.Limit{{Remaining: 0, Reset: 10 * s, Source: "x-ratelimit"}}},
		{"remaining folded", header("X-RateLimit-Remaining", "5, 0", "X-RateLimit-Reset", "10"),
			time.Time{}, []rlheader.Limit{{Remaining: 0, Reset: 10 * s, Source: "x-ratelimit"}}},
		{"resets twice", header("X-RateLimit-Remaining", "3", "X-RateLimit-Reset", "10", "X-RateLimit-Reset", "40"),
			time.Time{}, []rlheader.Limit{{Remaining: 3, Reset: 40 * s, Source: "x-ratelimit"}}},
		{"retry-after twice", header("Retry-After", "30", "Retry-After", "120"),
			time.Time{}, []rlheader.Limit{{Reset: 120 * s, Source: "retry-after"}}},
		{"retry-after folded, a date among them", header("Retry-After", date(now.Add(90*s))+", 30"),
			time.Time{}, []rlheader.Limit{{Reset: 90 * s, Source: "retry-after"}}},
		{"limit then its policy", header("X-RateLimit-Remaining", "9", "X-RateLimit-Reset", "1", "X-RateLimit-Limit", "10, 10;w=1"),
			time.Time{}, []rlheader.Limit{{Remaining: 9, Reset: s, Limit: 10, Source: "x-ratelimit"}}},
		{"policies only", header("X-RateLimit-Remaining", "9", "X-RateLimit-Reset", "1", "X-RateLimit-Limit", "1000;w=3600, 100;w=60"),
			time.Time{}, []rlheader.Limit{{Remaining: 9, Reset: s, Limit: 100, Source: "x-ratelimit"}}},
		{"limits twice", header("RateLimit-Remaining", "9, 7", "RateLimit-Reset", "5", "RateLimit-Limit", "100", "RateLimit-Limit", "50"),
			time.Time{}, []rlheader.Limit{{Remaining: 7, Reset: 5 * s, Limit: 50, Source: "ratelimit"}}},
		{"draft 07 twice", header("RateLimit", "limit=100, remaining=50, reset=5", "RateLimit", "remaining=3, reset=9"),
			time.Time{}, []rlheader.Limit{{Remaining: 3, Reset: 9 * s, Limit: 100, Source: "ratelimit"}}},
	})
}

// Class 5: every family in a response is read, each its own Limit, and
// Binding takes the strictest.
func TestAllFamilies(t *testing.T) {
	t.Parallel()
	runParse(t, []parseCase{
		{"x-ratelimit and x-rate-limit", header("X-RateLimit-Remaining", "50", "X-RateLimit-Reset", "60",
			"X-Rate-Limit-Remaining", "0", "X-Rate-Limit-Reset", "10"), time.Time{},
			[]rlheader.Limit{{Remaining: 50, Reset: 60 * s, Source: "x-ratelimit"}, {Remaining: 0, Reset: 10 * s, Source: "x-ratelimit"}}},
		{"all five", header("RateLimit", `"p";r=8;t=4`, "RateLimit-Remaining", "7", "RateLimit-Reset", "3",
			"X-RateLimit-Remaining", "6", "X-RateLimit-Reset", "2", "X-Rate-Limit-Remaining", "5", "X-Rate-Limit-Reset-After", "1",
			"Retry-After", "9"), time.Time{},
			[]rlheader.Limit{{Remaining: 8, Reset: 4 * s, Source: "ratelimit"}, {Remaining: 7, Reset: 3 * s, Source: "ratelimit"},
				{Remaining: 6, Reset: 2 * s, Source: "x-ratelimit"}, {Remaining: 5, Reset: s, Source: "x-ratelimit"},
				{Reset: 9 * s, Source: "retry-after"}}},
	})
	l, ok := rlheader.Binding(rlheader.Parse(header("X-RateLimit-Remaining", "50", "X-RateLimit-Reset", "60",
		"X-Rate-Limit-Remaining", "0", "X-Rate-Limit-Reset", "10"), now))
	if !ok || l.Remaining != 0 || l.Reset != 10*s || !strings.HasPrefix(l.Header, "X-Rate-Limit-Remaining") {
		t.Errorf("Binding = %+v, %v; want X-Rate-Limit's hold", l, ok)
	}
}

// Class 6: Remaining is at most a known Limit.
func TestRemainingClampedToLimit(t *testing.T) {
	t.Parallel()
	runParse(t, []parseCase{
		{"x-ratelimit", header("X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "50", "X-RateLimit-Reset", "5"),
			time.Time{}, []rlheader.Limit{{Remaining: 10, Reset: 5 * s, Limit: 10, Source: "x-ratelimit"}}},
		{"limit 0: unknown", header("X-RateLimit-Limit", "0", "X-RateLimit-Remaining", "50", "X-RateLimit-Reset", "5"),
			time.Time{}, []rlheader.Limit{{Remaining: 50, Reset: 5 * s, Source: "x-ratelimit"}}},
		{"draft 08 policy", header("RateLimit", `"p";r=9;t=2`, "RateLimit-Policy", `"p";q=5;w=2`),
			time.Time{}, []rlheader.Limit{{Remaining: 5, Reset: 2 * s, Limit: 5, Window: 2 * s, Source: "ratelimit"}}},
		{"drafts 00-06", header("RateLimit-Limit", "60", "RateLimit-Remaining", "1e9", "RateLimit-Reset", "20"),
			time.Time{}, []rlheader.Limit{{Remaining: 60, Reset: 20 * s, Limit: 60, Source: "ratelimit"}}},
	})
	sh, _ := rlheader.Profile("shopify")
	if got := bare(sh.Parse(header("X-Shopify-Shop-Api-Call-Limit", "-3/40"), now)); len(got) != 1 || got[0].Remaining != 40 {
		t.Errorf("used -3 of 40: %+v, want 40 left", got)
	}
}

// Class 7: a number too long or too big is the bound, never ignored;
// what is not a number is not read.
func TestHugeNumbersCapped(t *testing.T) {
	t.Parallel()
	max := sizing.MaxInterval
	digits34 := strings.Repeat("9", 34)
	runParse(t, []parseCase{
		{"34-digit retry-after", header("Retry-After", digits34), time.Time{}, []rlheader.Limit{{Reset: max, Source: "retry-after"}}},
		{"33-digit reset, nothing left", header("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", strings.Repeat("4", 33)),
			time.Time{}, []rlheader.Limit{{Remaining: 0, Reset: max, Source: "x-ratelimit"}}},
		{"600 digits, beyond float64", header("Retry-After", "1"+strings.Repeat("0", 599)), time.Time{},
			[]rlheader.Limit{{Reset: max, Source: "retry-after"}}},
		{"1e400", header("Retry-After", "1e400"), time.Time{}, []rlheader.Limit{{Reset: max, Source: "retry-after"}}},
		{"40-digit remaining", header("X-RateLimit-Remaining", strings.Repeat("7", 40), "X-RateLimit-Reset", "10"),
			time.Time{}, []rlheader.Limit{{Remaining: rlheader.MaxUnits, Reset: 10 * s, Source: "x-ratelimit"}}},
		{"draft 08 t of 50 digits", header("RateLimit", `"p";r=0;t=`+strings.Repeat("5", 50)),
			time.Time{}, []rlheader.Limit{{Remaining: 0, Reset: max, Source: "ratelimit"}}},
		{"a line past 8 KiB is not read", header("Retry-After", strings.Repeat("9", 9000), "Retry-After", "30"),
			time.Time{}, []rlheader.Limit{{Reset: 30 * s, Source: "retry-after"}}},
		{"nor a 17th line", header(slices.Concat(slices.Repeat([]string{"Retry-After", "1"}, 16), []string{"Retry-After", "99"})...),
			time.Time{}, []rlheader.Limit{{Reset: s, Source: "retry-after"}}},
		{"garbage", header("Retry-After", "NaN", "Retry-After", "Inf", "Retry-After", "0x10", "Retry-After", "1e",
			"Retry-After", "12abc", "Retry-After", "1_000", "Retry-After", strings.Repeat("9", 2000)), time.Time{}, nil},
	})
}

// Class 8: a quoted policy name is the whole name, whatever ; or , it
// holds; parameters come only after it.
func TestQuotedPolicyName(t *testing.T) {
	t.Parallel()
	runParse(t, []parseCase{
		{"semicolons in the name", header("RateLimit", `"a;t=86400;b";r=5;t=1`, "RateLimit-Policy", `"a;t=86400;b";q=10;w=1`),
			time.Time{}, []rlheader.Limit{{Remaining: 5, Reset: s, Limit: 10, Window: s, Source: "ratelimit"}}},
		{"a comma in the name", header("RateLimit", `"x,y";r=2;t=3, "z";r=7;t=9`, "RateLimit-Policy", `"z";q=8;w=9, "x,y";q=4;w=3`),
			time.Time{}, []rlheader.Limit{{Remaining: 2, Reset: 3 * s, Limit: 4, Window: 3 * s, Source: "ratelimit"},
				{Remaining: 7, Reset: 9 * s, Limit: 8, Window: 9 * s, Source: "ratelimit"}}},
		{"escapes", header("RateLimit", `"say \"hi\";r=0";r=4;t=2`, "RateLimit-Policy", `"say \"hi\";r=0";q=6`),
			time.Time{}, []rlheader.Limit{{Remaining: 4, Reset: 2 * s, Limit: 6, Source: "ratelimit"}}},
		{"a token name", header("RateLimit", `default;r=50;t=30`, "RateLimit-Policy", `default;q=100;w=60`),
			time.Time{}, []rlheader.Limit{{Remaining: 50, Reset: 30 * s, Limit: 100, Window: 60 * s, Source: "ratelimit"}}},
		{"unterminated", header("RateLimit", `"abc;r=1;t=2`), time.Time{}, nil},
		{"text after the name", header("RateLimit", `"a"x;r=1;t=1`), time.Time{}, nil},
	})
}

// Limit.Header names the lines each limit was read from.
func TestHeaderField(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("8", 200)
	for _, c := range []struct {
		name string
		h    http.Header
		want []string
	}{
		{"x-ratelimit", header("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1e300"),
			[]string{"X-RateLimit-Remaining: 0; X-RateLimit-Reset: 1e300"}},
		{"reset-after read, reset not", header("X-RateLimit-Remaining", "1", "X-RateLimit-Reset", "1800000003", "X-RateLimit-Reset-After", "2"),
			[]string{"X-RateLimit-Remaining: 1; X-RateLimit-Reset-After: 2"}},
		{"repeated", header("Retry-After", "30", "Retry-After", "120"), []string{"Retry-After: 30, 120"}},
		{"cut", header("Retry-After", long), []string{"Retry-After: " + long[:80] + "…"}},
		{"with Date", header("Date", date(now), "Retry-After", date(now.Add(9*s))),
			[]string{"Retry-After: " + date(now.Add(9*s)) + "; Date: " + date(now)}},
		{"draft 08 item", header("RateLimit", `"a";r=1;t=2, "b";r=3;t=4`, "RateLimit-Policy", `"b";q=9`),
			[]string{`RateLimit: "a";r=1;t=2`, `RateLimit: "b";r=3;t=4; RateLimit-Policy: "b";q=9`}},
		{"drafts 00-06", header("RateLimit-Reset", "5", "RateLimit-Limit", "10", "RateLimit-Remaining", "2"),
			[]string{"RateLimit-Remaining: 2; RateLimit-Limit: 10; RateLimit-Reset: 5"}},
	} {
		var got []string
		for _, l := range rlheader.Parse(c.h, now) {
			got = append(got, l.Header)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: Header = %q, want %q", c.name, got, c.want)
		}
	}
}
