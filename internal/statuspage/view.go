package statuspage

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Keys of the page's elements.

// DownstreamKey is the data-k key of a downstream's field on the page.
func DownstreamKey(name, field string) string { return "ds/" + name + "/" + field }

// LimiterKey is the data-k key of a limiter's field on the page.
func LimiterKey(downstream, name, field string) string {
	return "lim/" + downstream + "/" + name + "/" + field
}

// ScriptKey is the data-k key of a script's field on the page.
func ScriptKey(script, field string) string { return "script/" + script + "/" + field }

func count(v float64) string { return strconv.FormatFloat(math.Round(v), 'f', -1, 64) }

func perSec(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) + "/s" }

func dur(v *float64) string {
	if v == nil {
		return "—"
	}
	s := *v
	switch {
	case s < 0.001:
		return strconv.FormatFloat(s*1e6, 'f', 0, 64) + " µs"
	case s < 1:
		return strconv.FormatFloat(s*1e3, 'f', 1, 64) + " ms"
	}
	return strconv.FormatFloat(s, 'f', 2, 64) + " s"
}

// view formats a snapshot for the page.
func view(s Snapshot) View {
	v := View{Cells: map[string]string{}, Sparks: map[string]Spark{}, Rows: map[string]bool{}, Processes: processRows(s)}
	v.Cells["updated"] = s.GeneratedAt.Format("15:04:05") + " UTC"
	v.Cells["window"] = strconv.FormatFloat(math.Round(s.WindowSeconds), 'f', 0, 64) + " s"
	v.Cells["warning"] = strings.TrimSpace(s.Warning + " " + protocolWarning(s.Fleet))
	v.Cells["live"] = "live"
	fleetCells(v.Cells, s)
	if !s.Redis.Reachable {
		since := "start"
		if s.Redis.LastOK != nil {
			since = s.Redis.LastOK.Format("15:04:05") + " UTC"
		}
		v.Cells["live"] = "Redis unreachable · figures stale since " + since
	}
	for _, d := range s.Downstreams {
		downstreamCells(v.Cells, d, s.Redis.Reachable, s.GeneratedAt)
		headlineCells(v.Cells, d, s.WindowSeconds)
		for f, on := range detailRows(d, len(s.Fleet)) {
			v.Rows[DownstreamKey(d.Name, f)] = on
		}
		v.Sparks[d.Name] = spark(d.PerSecond, d.RatePerSecond, int(math.Round(s.WindowSeconds/max(s.IntervalSeconds, 1e-9))))
	}
	for _, l := range s.Limiters {
		for _, o := range Outcomes {
			v.Cells[LimiterKey(l.Downstream, l.Name, o)] = count(l.Decisions[o])
		}
		v.Cells[LimiterKey(l.Downstream, l.Name, "fail_open")] = count(l.FailOpen)
		v.Cells[LimiterKey(l.Downstream, l.Name, "mode")] = l.Mode
		v.Cells[LimiterKey(l.Downstream, l.Name, "shadow")] = shadowCell(l)
	}
	for _, sc := range s.Scripts {
		v.Cells[ScriptKey(sc.Script, "calls")] = count(sc.CallsTotal)
		v.Cells[ScriptKey(sc.Script, "errors")] = count(sc.ErrorsTotal)
		v.Cells[ScriptKey(sc.Script, "p99")] = dur(sc.P99Seconds)
	}
	return v
}

// downstreamCells formats one downstream's row into cells.
func downstreamCells(cells map[string]string, d DownstreamSnapshot, redisReachable bool, now time.Time) {
	k := func(f string) string { return DownstreamKey(d.Name, f) }
	cells[k("state")] = downstreamState(d, redisReachable)
	cells[k("configured")] = d.ConfiguredRate
	cells[k("in_force")] = perSec(d.RatePerSecond)
	cells[k("override")] = cmpOr(d.OverrideRate, "none")
	cells[k("schedule")] = "none"
	if d.ScheduleChanges > 0 {
		cells[k("schedule")] = fmt.Sprintf("%d changes", d.ScheduleChanges)
	}
	cells[k("adaptive")] = "off"
	if a := d.Adaptive; a != nil {
		cur := "not moved yet"
		if a.RatePerSecond > 0 {
			cur = perSec(a.RatePerSecond)
		}
		cells[k("adaptive")] = fmt.Sprintf("%s (%s … %s)", cur, a.Floor, a.Ceiling)
	}
	cells[k("releases")] = count(d.ReleasesTotal)
	for _, st := range BacklogStates {
		if b, ok := d.Backlog[st]; ok {
			cells[k("backlog_"+st)] = count(b)
		} else {
			cells[k("backlog_"+st)] = "—"
		}
	}
	cells[k("held")] = count(d.Held)
	cells[k("leases")] = "no cap"
	if d.ConcurrencyLimit > 0 {
		cells[k("leases")] = count(d.LeasesInUse) + " / " + count(d.ConcurrencyLimit)
	}
	cells[k("fair")] = "off (first come, first served)"
	if fi := d.Fair; fi != nil {
		var top []string
		for _, kr := range fi.TopKeys {
			top = append(top, kr.Key+" "+count(kr.Releases))
		}
		cells[k("fair")] = fmt.Sprintf("%s keys waiting (%s tasks) · Jain %.2f · top: %s", count(fi.ActiveKeys), count(fi.WaitingTasks),
			fi.JainIndex, cmpOr(strings.Join(top, ", "), "none yet"))
		if fi.KeyControlCount > 0 {
			var kcs []string
			for _, kc := range fi.KeyControls {
				kcs = append(kcs, kc.String())
			}
			more := ""
			if n := fi.KeyControlCount - len(fi.KeyControls); n > 0 {
				more = fmt.Sprintf(" and %d more", n)
			}
			cells[k("fair")] += " · key controls: " + strings.Join(kcs, ", ") + more
		}
		if len(fi.TopKeys) > 0 && fi.TopKeys[0].Hidden || len(fi.KeyControls) > 0 && fi.KeyControls[0].Hidden {
			cells[k("fair")] += " (key names need the token)"
		}
	}
	cells[k("workers")] = strconv.Itoa(d.Workers)
	cells[k("max_wait")] = d.MaxWait
	cells[k("late_p50")] = dur(d.Lateness.P50Seconds)
	cells[k("late_p99")] = dur(d.Lateness.P99Seconds)
	cells[k("late_mean")] = dur(d.Lateness.MeanSeconds)
	for field, v := range map[string]float64{"pushbacks": d.PushbacksTotal, "bucket_full": d.BucketFullTotal,
		"late_skips": d.LateSkipsTotal, "deferrals": d.DeferralsTotal, "enqueued": d.EnqueuedTotal,
		"quarantined": d.QuarantinedTotal, "quarantine_entries": d.QuarantineEntries} {
		cells[k(field)] = count(v)
	}
	var outs []string
	for _, o := range sortedKeys(d.Outcomes) {
		outs = append(outs, o+" "+count(d.Outcomes[o]))
	}
	cells[k("outcomes")] = cmpOr(strings.Join(outs, " · "), "none yet")
	breakerCells(cells, k, d.Breaker, now)
	limitCells(cells, d)
	cells[k("shaping_mode")] = d.ShapingMode
	cells[k("shadow_wait")] = "—"
	if d.ShadowWait.Count > 0 {
		cells[k("shadow_wait")] = fmt.Sprintf("%s / %s (%s tasks)", dur(d.ShadowWait.P50Seconds), dur(d.ShadowWait.P99Seconds), count(d.ShadowWait.Count))
	}
	cells[k("deadline_passed")] = count(d.DeadlinePassedTotal)
	cells[k("late_rejected")] = count(d.LateRejectedTotal)
}

// shadowCell says what a limiter did in shadow: "would reject 71 · would
// defer 0 of 100", or "—" when it never ran in shadow.
func shadowCell(l LimiterSnapshot) string {
	total := 0.0
	for _, v := range l.Shadow {
		total += v
	}
	if total == 0 {
		return "—"
	}
	out := fmt.Sprintf("would reject %s · would defer %s of %s", count(l.Shadow["rejected"]), count(l.Shadow["deferred"]), count(total))
	if e := l.Shadow["error"]; e > 0 {
		out += fmt.Sprintf(" (%s errors)", count(e))
	}
	return out
}

// breakerCells formats the breaker's state and transitions.
func breakerCells(cells map[string]string, k func(string) string, b *BreakerInfo, now time.Time) {
	if b == nil {
		cells[k("breaker")], cells[k("breaker_moves")] = "off", "—"
		return
	}
	s := strings.ReplaceAll(b.State, "_", "-")
	switch {
	case b.OpenUntil != nil && b.OpenUntil.After(now):
		s += fmt.Sprintf(" (%s left)", dur(ptr(b.OpenUntil.Sub(now).Seconds())))
	case b.OpenUntil != nil:
		s += " (cool-down over: next probe half-opens it)"
	case b.State == "half_open":
		s += " (probing)"
	}
	cells[k("breaker")] = s
	var moves []string
	for _, to := range sortedKeys(b.Transitions) {
		moves = append(moves, "to "+strings.ReplaceAll(to, "_", "-")+" "+count(b.Transitions[to]))
	}
	cells[k("breaker_moves")] = cmpOr(strings.Join(moves, " · "), "none yet")
}

func ptr(v float64) *float64 { return &v }

// downstreamState is the state cell: what holds the downstream, if anything.
func downstreamState(d DownstreamSnapshot, redisReachable bool) string {
	switch {
	case !redisReachable:
		return "Redis unreachable"
	case d.Paused:
		return "paused"
	case d.Breaker != nil && d.Breaker.State != "closed":
		return "breaker " + strings.ReplaceAll(d.Breaker.State, "_", "-")
	case strings.HasPrefix(d.HeldBy, "quota "):
		return "held by quota"
	case d.HeldBy == "announced":
		return "held by announced limit"
	case d.ShapingMode == "shadow":
		return "shadow"
	case d.Adaptive != nil:
		return "adaptive"
	}
	return "running"
}

// spark draws per-interval rates right-aligned in the box, scaled so that
// the rate in force sits at 80% of the height (or the peak at the top).
func spark(vals []float64, rate float64, slots int) Spark {
	slots = max(slots, len(vals), 2)
	top := rate * 1.25
	for _, x := range vals {
		top = max(top, x)
	}
	if top <= 0 {
		top = 1
	}
	y := func(x float64) float64 { return math.Round((SparkH-1-x/top*(SparkH-2))*10) / 10 }
	step := float64(SparkW) / float64(slots-1)
	var b strings.Builder
	off := slots - len(vals)
	for i, x := range vals {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s,%s", strconv.FormatFloat(math.Round(float64(off+i)*step*10)/10, 'f', -1, 64),
			strconv.FormatFloat(y(x), 'f', -1, 64))
	}
	return Spark{Points: b.String(), RateY: y(rate), Max: top}
}
