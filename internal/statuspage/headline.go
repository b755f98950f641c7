package statuspage

import (
	"fmt"
	"strings"
)

// headlineCells formats a card's headline: the achieved rate against the
// rate in force, the backlog, the predicted drain time, and the why-waiting
// line (d.Why).
func headlineCells(cells map[string]string, d DownstreamSnapshot, windowSeconds float64) {
	k := func(f string) string { return DownstreamKey(d.Name, f) }
	achieved, by := d.AchievedPerSecond, "achieved over "+secs(windowSeconds)
	if f := d.Fleet; f != nil && f.Processes > 1 {
		achieved, by = f.AchievedPerSecond, fmt.Sprintf("%s by %d processes", by, f.Processes)
	}
	cells[k("achieved")] = perSec(achieved)
	cells[k("achieved_of")] = by + " · " + perSec(d.RatePerSecond) + " in force"
	if d.Paused {
		// the window's rate includes the time before the pause: say so
		now := 0.0
		if n := len(d.PerSecond); n > 0 {
			now = d.PerSecond[n-1]
		}
		cells[k("achieved")] = "paused"
		cells[k("achieved_of")] = fmt.Sprintf("%s now · %s over the last %s, before the pause", perSec(now), perSec(achieved), secs(windowSeconds))
	}
	cells[k("backlog")], cells[k("backlog_note")] = backlogHeadline(d)
	cells[k("drain")], cells[k("drain_note")] = drainHeadline(d)
	cells[k("why_kind")] = d.Why.Label
	cells[k("why")] = d.Why.Text
}

// backlogHeadline is the backlog figure and its note: the states that
// hold tasks ("pending 300 · scheduled 20").
func backlogHeadline(d DownstreamSnapshot) (string, string) {
	if len(d.Backlog) == 0 {
		return "—", "backlog not read yet"
	}
	var parts []string
	for _, st := range BacklogStates {
		if v := d.Backlog[st]; v > 0 && st != "archived" {
			parts = append(parts, st+" "+count(v))
		}
	}
	if len(parts) == 0 {
		return "0", "waiting"
	}
	return count(backlogTotal(d)), "waiting · " + strings.Join(parts, " · ")
}

// drainHeadline is the predicted drain time and its note.
func drainHeadline(d DownstreamSnapshot) (string, string) {
	if s := d.DrainSeconds; s != nil {
		note := "to drain at the rate"
		switch {
		case d.Why.HoldSeconds != nil && *d.Why.HoldSeconds > 0:
			note = "to drain, after the " + d.Why.Label + " (" + secs(*d.Why.HoldSeconds) + ")"
		case d.Why.Reason != ReasonRate:
			note = "to drain (" + d.Why.Label + ")"
		}
		return "≈ " + secs(*s), note
	}
	switch d.Why.Reason {
	case ReasonIdle:
		return "—", "nothing to drain"
	case ReasonPaused:
		return "—", "does not drain while paused"
	case ReasonShadow:
		return "—", "released at once (shadow)"
	case ReasonRedis:
		return "—", "unknown while Redis is unreachable"
	}
	return "—", "drain time unknown (" + d.Why.Label + ")"
}

// detailRows says which of a card's detail rows are shown, by field: a
// feature that is off and a count that is still zero hide their row.
func detailRows(d DownstreamSnapshot, processes int) map[string]bool {
	return map[string]bool{
		"fleet":         processes > 1,
		"configured":    true,
		"in_force":      true,
		"override":      d.OverrideRate != "",
		"adaptive":      d.Adaptive != nil,
		"schedule":      d.ScheduleChanges > 0,
		"releases":      true,
		"lateness":      d.Lateness.Count > 0,
		"held":          true,
		"leases":        d.ConcurrencyLimit > 0,
		"fair":          d.Fair != nil,
		"pushbacks":     d.PushbacksTotal > 0,
		"bucket_full":   d.BucketFullTotal > 0,
		"late_skips":    d.LateSkipsTotal > 0,
		"enqueued":      d.EnqueuedTotal > 0 || d.DeferralsTotal > 0,
		"quarantined":   d.QuarantinedTotal > 0 || d.QuarantineEntries > 0,
		"outcomes":      len(d.Outcomes) > 0,
		"breaker":       d.Breaker != nil,
		"breaker_moves": d.Breaker != nil && len(d.Breaker.Transitions) > 0,
		"quotas":        len(d.Quotas) > 0,
		"announced":     d.Announced != nil || d.AnnouncedPacePerSecond > 0,
		"clamp":         d.Clamp != nil,
		"settled":       d.SettledChargedTotal > 0 || d.SettledRefundedTotal > 0,
		"shaping_mode":  d.ShapingMode != "enforce",
		"shadow_wait":   d.ShadowWait.Count > 0,
		"deadline":      d.DeadlinePassedTotal > 0 || d.LateRejectedTotal > 0,
	}
}
