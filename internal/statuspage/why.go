package statuspage

import (
	"fmt"
	"strings"
	"time"
)

// Why is what holds a downstream's backlog now: the status page's "why
// waiting" line. WhyWaiting derives it from the snapshot's fields.
type Why struct {
	// Reason is one of the Reason constants.
	Reason string `json:"reason"`
	// Label names the reason on the page ("quota", "paused"); Text says
	// the rest ("100,000 per day from 00:00 UTC · 132 used · resets in
	// 17 h 02 m").
	Label string `json:"label"`
	Text  string `json:"text"`
	// HoldSeconds is how long the hold lasts when the snapshot says it (a
	// breaker's cool-down, a quota's or an announced limit's reset); nil
	// otherwise.
	HoldSeconds *float64 `json:"hold_seconds,omitempty"`
}

// The reasons WhyWaiting gives, in the order it tests them: the first
// that applies is the one shown.
const (
	ReasonRedis      = "redis_unreachable" // the sampler cannot read Redis
	ReasonPaused     = "paused"            // shaper ctl pause
	ReasonBreaker    = "breaker"           // the circuit breaker is open or half-open
	ReasonIdle       = "nothing_waiting"   // no backlog
	ReasonShadow     = "shadow"            // shaping in shadow: released at once
	ReasonAnnounced  = "announced_hold"    // the downstream's answers said nothing is left (or Retry-After)
	ReasonQuota      = "quota"             // a configured quota is spent
	ReasonPace       = "announced_pace"    // the announced limit spaces releases wider than the rate
	ReasonPushback   = "pushback"          // 429/503 answers pushed the bucket back just now
	ReasonCap        = "concurrency_cap"   // every allowed call is in flight
	ReasonKeyCeiling = "key_ceilings"      // the keys with work are each at their key_rate
	ReasonFair       = "fair_turns"        // several keys take turns at the rate
	ReasonNotDue     = "not_due"           // the backlog is scheduled or retrying, not yet due
	ReasonRate       = "rate"              // the rate in force
)

// RecentSpan is the span of DownstreamSnapshot.RecentPushbacks.
const RecentSpan = 10 * time.Second

// WhyWaiting says what holds d's backlog at now (the snapshot's time):
// the first of the Reason constants, in their order, whose condition the
// snapshot meets. redisReachable is Snapshot.Redis.Reachable. A backlog
// not read yet (no shaper_queue_tasks series) is not taken for an empty
// one.
func WhyWaiting(d DownstreamSnapshot, now time.Time, redisReachable bool) Why {
	waiting := backlogTotal(d)
	switch {
	case !redisReachable:
		return Why{Reason: ReasonRedis, Label: "Redis unreachable", Text: "nothing is released without a reservation; the figures are stale"}
	case d.Paused:
		return Why{Reason: ReasonPaused, Label: "paused",
			Text: fmt.Sprintf("nothing is released until it is resumed (shaper ctl resume %s)", d.Name)}
	case d.Breaker != nil && d.Breaker.State != "closed":
		return breakerWhy(d.Breaker, now)
	case len(d.Backlog) > 0 && waiting == 0 && d.Held == 0:
		return Why{Reason: ReasonIdle, Label: "nothing waiting", Text: "the queue is empty"}
	case d.ShapingMode == "shadow":
		return Why{Reason: ReasonShadow, Label: "shadow", Text: "tasks are released at once; the waits shaping would give are counted"}
	}
	if w, ok := announcedHoldWhy(d); ok {
		return w
	}
	if q, ok := heldQuota(d); ok {
		w := Why{Reason: ReasonQuota, Label: "quota", Text: quotaText(q), HoldSeconds: q.ResetInSeconds}
		return w
	}
	if d.HeldBy == "announced pace" || d.AnnouncedPacePerSecond > 0 {
		return paceWhy(d)
	}
	if d.RecentPushbacks > 0 {
		return Why{Reason: ReasonPushback, Label: "pushback",
			Text: fmt.Sprintf("the downstream asked to back off (429/503) %s× in the last %s", count(d.RecentPushbacks), secs(RecentSpan.Seconds()))}
	}
	if leases := fleetLeases(d); d.ConcurrencyLimit > 0 && leases >= d.ConcurrencyLimit {
		return Why{Reason: ReasonCap, Label: "concurrency cap",
			Text: fmt.Sprintf("%s of %s calls in flight; the next starts when one ends", count(leases), count(d.ConcurrencyLimit))}
	}
	if fi := d.Fair; fi != nil && fi.KeyRatePerSecond > 0 && fi.ActiveKeys >= 1 && fi.ActiveKeys*fi.KeyRatePerSecond < d.RatePerSecond {
		return Why{Reason: ReasonKeyCeiling, Label: "key ceilings",
			Text: fmt.Sprintf("%s with work × %s each = %s, below %s in force", plural(fi.ActiveKeys, "key"), fi.KeyRate,
				perSec(fi.ActiveKeys*fi.KeyRatePerSecond), perSec(d.RatePerSecond))}
	}
	if fi := d.Fair; fi != nil && fi.ActiveKeys >= 2 {
		return Why{Reason: ReasonFair, Label: "fair turns",
			Text: fmt.Sprintf("%s take turns at %s · %s in fair order", plural(fi.ActiveKeys, "key"), perSec(d.RatePerSecond), plural(fi.WaitingTasks, "task"))}
	}
	if waiting > 0 && d.Backlog["pending"] == 0 && d.Backlog["active"] == 0 && (d.Fair == nil || d.Fair.ActiveKeys == 0) {
		return Why{Reason: ReasonNotDue, Label: "not due",
			Text: fmt.Sprintf("%s scheduled and %s in retry wait for their time (deferred, ProcessAt or a retry's backoff)",
				count(d.Backlog["scheduled"]), count(d.Backlog["retry"]))}
	}
	return Why{Reason: ReasonRate, Label: "rate", Text: rateText(d)}
}

// backlogTotal is the tasks d's queue holds that are still to run:
// pending, active, scheduled and retry.
func backlogTotal(d DownstreamSnapshot) float64 {
	n := 0.0
	for _, st := range []string{"pending", "active", "scheduled", "retry"} {
		n += d.Backlog[st]
	}
	return n
}

// fleetLeases is the calls in flight under d's cap: the fleet's when the
// snapshot has it, this process's otherwise.
func fleetLeases(d DownstreamSnapshot) float64 {
	if d.Fleet != nil {
		return d.Fleet.LeasesInUse
	}
	return d.LeasesInUse
}

func breakerWhy(b *BreakerInfo, now time.Time) Why {
	if b.State == "half_open" {
		return Why{Reason: ReasonBreaker, Label: "breaker half-open", Text: "probe calls test the downstream; good ones close it (" + b.Settings + ")"}
	}
	w := Why{Reason: ReasonBreaker, Label: "breaker open", Text: "nothing is released: the downstream failed (" + b.Settings + ")"}
	switch {
	case b.OpenUntil != nil && b.OpenUntil.After(now):
		left := b.OpenUntil.Sub(now).Seconds()
		w.HoldSeconds = &left
		w.Text = "nothing is released for " + secs(left) + " more, then probe calls test the downstream"
	case b.OpenUntil != nil:
		w.Text = "the cool-down is over: the next probe call half-opens it"
	}
	return w
}

// announcedHoldWhy is the hold of an announced limit that left nothing
// (RateLimit, X-RateLimit-*, Retry-After), with the header that said it.
func announcedHoldWhy(d DownstreamSnapshot) (Why, bool) {
	a := d.Announced
	held := a != nil && a.Effect == "hold" && a.ResetInSeconds > 0
	if !held && d.HeldBy != "announced" {
		return Why{}, false
	}
	w := Why{Reason: ReasonAnnounced, Label: "announced hold"}
	if a == nil {
		w.Text = "the limit the downstream announced (to another process) is spent"
		return w, true
	}
	left := fmt.Sprintf("%d left", a.Remaining)
	if a.Limit > 0 {
		left = fmt.Sprintf("%d of %d left", a.Remaining, a.Limit)
	}
	reset := a.ResetInSeconds
	w.HoldSeconds = &reset
	w.Text = fmt.Sprintf("the downstream's %s said %s · resumes in %s", a.Source, left, secs(reset))
	if a.Header != "" {
		w.Text += " · " + a.Header
	}
	return w, true
}

// heldQuota is the quota that held d's last reservation.
func heldQuota(d DownstreamSnapshot) (QuotaSnapshot, bool) {
	name, ok := strings.CutPrefix(d.HeldBy, "quota ")
	if !ok {
		return QuotaSnapshot{}, false
	}
	for _, q := range d.Quotas {
		if q.Quota == name {
			return q, true
		}
	}
	return QuotaSnapshot{Quota: name, Display: name}, true
}

func paceWhy(d DownstreamSnapshot) Why {
	w := Why{Reason: ReasonPace, Label: "announced pace", Text: "releases spaced so that what the downstream announced lasts until its reset"}
	if d.AnnouncedPacePerSecond > 0 {
		w.Text = fmt.Sprintf("%s (below %s in force) so that what the downstream announced lasts until its reset",
			perSec(d.AnnouncedPacePerSecond), perSec(d.RatePerSecond))
	}
	if a := d.Announced; a != nil {
		w.Text += fmt.Sprintf(" · %s: %d left, resets in %s", a.Source, a.Left, secs(a.ResetInSeconds))
	}
	return w
}

// rateText is the rate-bound line: the rate in force and where it comes
// from.
func rateText(d DownstreamSnapshot) string {
	s := perSec(d.RatePerSecond) + " in force"
	switch {
	case d.OverrideRate != "":
		s += " (override; configured " + d.ConfiguredRate + ")"
	case d.Adaptive != nil && d.Adaptive.RatePerSecond > 0:
		s += " (adaptive, " + d.Adaptive.Floor + " … " + d.Adaptive.Ceiling + ")"
	case d.ScheduleChanges > 0:
		s += " (by the schedule; configured " + d.ConfiguredRate + ")"
	}
	return s + " · the backlog drains at the rate"
}

// DrainSeconds predicts how long d's backlog takes to drain: the hold
// that why names (when it says how long), then the backlog at the rate
// the reason leaves (the announced pace, the keys' ceilings, the rate
// achieved under a concurrency cap, else the rate in force). false when
// nothing waits, when nothing drains until an operator acts (paused,
// Redis unreachable), when the tasks are not due yet, or when the hold's
// end is unknown.
func DrainSeconds(d DownstreamSnapshot, why Why) (float64, bool) {
	waiting := backlogTotal(d)
	rate := d.RatePerSecond
	switch why.Reason {
	case ReasonIdle, ReasonPaused, ReasonRedis, ReasonShadow, ReasonNotDue:
		return 0, false
	case ReasonPace:
		rate = cmpPositive(d.AnnouncedPacePerSecond, rate)
	case ReasonKeyCeiling:
		rate = d.Fair.ActiveKeys * d.Fair.KeyRatePerSecond
	case ReasonCap:
		rate = min(rate, cmpPositive(fleetAchieved(d), rate))
	case ReasonBreaker, ReasonAnnounced:
		if why.HoldSeconds == nil {
			return 0, false
		}
	}
	if rate <= 0 || waiting == 0 {
		return 0, false
	}
	hold := 0.0
	if why.HoldSeconds != nil {
		hold = *why.HoldSeconds
	}
	return hold + waiting/rate, true
}

// fleetAchieved is d's achieved rate over every process when the
// snapshot has it, this process's otherwise.
func fleetAchieved(d DownstreamSnapshot) float64 {
	if d.Fleet != nil {
		return d.Fleet.AchievedPerSecond
	}
	return d.AchievedPerSecond
}

func cmpPositive(a, b float64) float64 {
	if a > 0 {
		return a
	}
	return b
}

// plural is "1 key", "3 keys".
func plural(n float64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return count(n) + " " + noun + "s"
}
