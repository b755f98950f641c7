package statuspage_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/statuspage"
)

func fp(v float64) *float64 { return &v }

// base is a running downstream at 20/s with a backlog of 300 pending.
func base() statuspage.DownstreamSnapshot {
	return statuspage.DownstreamSnapshot{Name: "api", ConfiguredRate: "20/s", RatePerSecond: 20, ShapingMode: "enforce",
		AchievedPerSecond: 19.8, Backlog: map[string]float64{"pending": 300, "active": 0, "scheduled": 0, "retry": 0, "archived": 2}}
}

// whyNow is the time of the snapshots in whyCases.
var whyNow = time.Date(2026, 12, 4, 6, 57, 50, 0, time.UTC)

// whyCases are WhyWaiting's steps: base() edited, and what it says.
var whyCases = []struct {
	name      string
	edit      func(d *statuspage.DownstreamSnapshot)
	redisDown bool
	reason    string
	label     string
	text      string  // the text, or a part of it after "…"
	hold      float64 // HoldSeconds; -1: nil
	drain     float64 // DrainSeconds; -1: none
}{
	{"rate", func(d *statuspage.DownstreamSnapshot) {}, false,
		statuspage.ReasonRate, "rate", "20.00/s in force · the backlog drains at the rate", -1, 15},
	{"rate override", func(d *statuspage.DownstreamSnapshot) { d.OverrideRate, d.RatePerSecond = "4/s", 4 }, false,
		statuspage.ReasonRate, "rate", "4.00/s in force (override; configured 20/s) · the backlog drains at the rate", -1, 75},
	{"redis unreachable beats everything", func(d *statuspage.DownstreamSnapshot) { d.Paused = true }, true,
		statuspage.ReasonRedis, "Redis unreachable", "nothing is released without a reservation; the figures are stale", -1, -1},
	{"paused", func(d *statuspage.DownstreamSnapshot) {
		d.Paused = true
		d.Breaker = &statuspage.BreakerInfo{State: "open"}
	}, false, statuspage.ReasonPaused, "paused", "nothing is released until it is resumed (shaper ctl resume api)", -1, -1},
	{"breaker open", func(d *statuspage.DownstreamSnapshot) {
		until := whyNow.Add(42 * time.Second)
		d.Breaker = &statuspage.BreakerInfo{State: "open", OpenUntil: &until}
	}, false, statuspage.ReasonBreaker, "breaker open", "nothing is released for 42 s more, then probe calls test the downstream", 42, 42 + 15},
	{"breaker open past its cool-down", func(d *statuspage.DownstreamSnapshot) {
		until := whyNow.Add(-time.Second)
		d.Breaker = &statuspage.BreakerInfo{State: "open", OpenUntil: &until}
	}, false, statuspage.ReasonBreaker, "breaker open", "the cool-down is over: the next probe call half-opens it", -1, -1},
	{"breaker half-open", func(d *statuspage.DownstreamSnapshot) {
		d.Breaker = &statuspage.BreakerInfo{State: "half_open", Settings: "closes after 3 probes at 1/s"}
	}, false, statuspage.ReasonBreaker, "breaker half-open", "…closes after 3 probes at 1/s", -1, -1},
	{"nothing waiting", func(d *statuspage.DownstreamSnapshot) { d.Backlog["pending"] = 0 }, false,
		statuspage.ReasonIdle, "nothing waiting", "the queue is empty", -1, -1},
	{"backlog not read yet is not empty", func(d *statuspage.DownstreamSnapshot) { d.Backlog = map[string]float64{} }, false,
		statuspage.ReasonRate, "rate", "…in force", -1, -1},
	{"shadow", func(d *statuspage.DownstreamSnapshot) { d.ShapingMode = "shadow" }, false,
		statuspage.ReasonShadow, "shadow", "…released at once", -1, -1},
	{"announced hold with its header", func(d *statuspage.DownstreamSnapshot) {
		d.Announced = &statuspage.AnnouncedSnapshot{Source: "retry-after", Remaining: 0, ResetInSeconds: 30, Effect: "hold", Header: "Retry-After: 30"}
		d.HeldBy = "quota 6/1m0s" // the announced hold is tested first
	}, false, statuspage.ReasonAnnounced, "announced hold", "the downstream's retry-after said 0 left · resumes in 30 s · Retry-After: 30", 30, 45},
	{"announced hold seen by another process", func(d *statuspage.DownstreamSnapshot) { d.HeldBy = "announced" }, false,
		statuspage.ReasonAnnounced, "announced hold", "the limit the downstream announced (to another process) is spent", -1, -1},
	{"quota in words", func(d *statuspage.DownstreamSnapshot) {
		d.HeldBy = "quota 100000/24h0m0s@0s"
		d.Quotas = []statuspage.QuotaSnapshot{{Quota: "5000/1h0m0s", Display: "5,000 per hour (sliding)", Used: 10, Limit: 5000, ResetInSeconds: fp(20)},
			{Quota: "100000/24h0m0s@0s", Display: "100,000 per day from 00:00 UTC", Aligned: true, Used: 100000, Limit: 100000, ResetInSeconds: fp(61330)}}
	}, false, statuspage.ReasonQuota, "quota", "100,000 per day from 00:00 UTC · 100,000 used · resets in 17 h 02 m", 61330, 61330 + 15},
	{"announced pace", func(d *statuspage.DownstreamSnapshot) {
		d.HeldBy, d.AnnouncedPacePerSecond = "announced pace", 5
		d.Announced = &statuspage.AnnouncedSnapshot{Source: "x-ratelimit", Left: 300, ResetInSeconds: 60, Effect: "pace"}
	}, false, statuspage.ReasonPace, "announced pace", "5.00/s (below 20.00/s in force) so that what the downstream announced lasts until its reset · x-ratelimit: 300 left, resets in 1 m 00 s", -1, 60},
	{"pushback", func(d *statuspage.DownstreamSnapshot) { d.RecentPushbacks, d.PushbacksTotal = 2, 7 }, false,
		statuspage.ReasonPushback, "pushback", "the downstream asked to back off (429/503) 2× in the last 10 s", -1, 15},
	{"concurrency cap, counted over the fleet", func(d *statuspage.DownstreamSnapshot) {
		d.ConcurrencyLimit, d.LeasesInUse = 3, 1
		d.Fleet = &statuspage.FleetDownstream{Processes: 2, LeasesInUse: 3, AchievedPerSecond: 6}
	}, false, statuspage.ReasonCap, "concurrency cap", "3 of 3 calls in flight; the next starts when one ends", -1, 50},
	{"cap not reached", func(d *statuspage.DownstreamSnapshot) { d.ConcurrencyLimit, d.LeasesInUse = 3, 2 }, false,
		statuspage.ReasonRate, "rate", "…in force", -1, 15},
	{"key ceilings", func(d *statuspage.DownstreamSnapshot) {
		d.Fair = &statuspage.FairInfo{ActiveKeys: 2, WaitingTasks: 300, KeyRate: "5/s", KeyRatePerSecond: 5}
	}, false, statuspage.ReasonKeyCeiling, "key ceilings", "2 keys with work × 5/s each = 10.00/s, below 20.00/s in force", -1, 30},
	{"fair turns", func(d *statuspage.DownstreamSnapshot) {
		d.Fair = &statuspage.FairInfo{ActiveKeys: 3, WaitingTasks: 316, KeyRate: "10/s", KeyRatePerSecond: 10}
	}, false, statuspage.ReasonFair, "fair turns", "3 keys take turns at 20.00/s · 316 tasks in fair order", -1, 15},
	{"not due", func(d *statuspage.DownstreamSnapshot) { d.Backlog["pending"], d.Backlog["scheduled"] = 0, 20 }, false,
		statuspage.ReasonNotDue, "not due", "20 scheduled and 0 in retry wait for their time (deferred, ProcessAt or a retry's backoff)", -1, -1},
}

// WhyWaiting names each reason from the snapshot's fields, the first that
// applies in the documented order, and its text says it in words.
func TestWhyWaiting(t *testing.T) {
	t.Parallel()
	for i, c := range whyCases {
		d := base()
		c.edit(&d)
		got := statuspage.WhyWaiting(d, whyNow, !c.redisDown)
		text := got.Text
		if part, ok := strings.CutPrefix(c.text, "…"); ok && strings.Contains(text, part) {
			text = c.text
		}
		if got.Reason != c.reason || got.Label != c.label || text != c.text {
			t.Errorf("step %d (%s): got %s %q %q, want %s %q %q", i, c.name, got.Reason, got.Label, got.Text, c.reason, c.label, c.text)
		}
		if (got.HoldSeconds == nil) != (c.hold < 0) || got.HoldSeconds != nil && math.Abs(*got.HoldSeconds-c.hold) > 1e-9 {
			t.Errorf("step %d (%s): got hold %v, want %v", i, c.name, deref(got.HoldSeconds), c.hold)
		}
		drain, ok := statuspage.DrainSeconds(d, got)
		if ok != (c.drain >= 0) || ok && math.Abs(drain-c.drain) > 1e-9 {
			t.Errorf("step %d (%s): got drain %v (%v), want %v", i, c.name, drain, ok, c.drain)
		}
	}
}

// Quotas read in words: thousands grouped, the window named, a fixed
// window's start in UTC.
func TestQuotaInWords(t *testing.T) {
	t.Parallel()
	for i, c := range []struct {
		q    statuspage.QuotaSnapshot
		want string
	}{
		{statuspage.QuotaSnapshot{Display: "100,000 per day from 00:00 UTC", Aligned: true, Used: 132, ResetInSeconds: fp(61330)},
			"100,000 per day from 00:00 UTC · 132 used · resets in 17 h 02 m"},
		{statuspage.QuotaSnapshot{Display: "5,000 per hour (sliding)", Used: 4999, ResetInSeconds: fp(200)},
			"5,000 per hour (sliding) · 4,999 used · use falls in 3 m 20 s"},
		{statuspage.QuotaSnapshot{Quota: "6/1m0s", Used: 0}, "6/1m0s · 0 used"},
	} {
		if got := statuspage.QuotaText(c.q); got != c.want {
			t.Errorf("step %d: got %q, want %q", i, got, c.want)
		}
	}
	for i, c := range []struct {
		limit   int64
		per     time.Duration
		aligned bool
		offset  time.Duration
		want    string
	}{
		{100000, 24 * time.Hour, true, 0, "100,000 per day from 00:00 UTC"},
		{5000, time.Hour, false, 0, "5,000 per hour (sliding)"},
		{1234567, 7 * 24 * time.Hour, false, 0, "1,234,567 per week (sliding)"},
		{100, 10 * time.Minute, true, 5 * time.Minute, "100 per 10 minutes from 00:05 UTC"},
		{10, 48 * time.Hour, false, 0, "10 per 2 days (sliding)"},
		{10, 1500 * time.Millisecond, false, 0, "10 per 1.5s (sliding)"},
		{999, 24 * time.Hour, true, 6*time.Hour + 30*time.Second, "999 per day from 06:00:30 UTC"},
	} {
		if got := statuspage.HumanQuota(c.limit, c.per, c.aligned, c.offset); got != c.want {
			t.Errorf("step %d: got %q, want %q", i, got, c.want)
		}
	}
}
