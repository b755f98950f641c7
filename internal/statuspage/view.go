package statuspage

import (
	"fmt"
	"math"
	"strconv"
	"strings"
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
	v := View{Cells: map[string]string{}, Sparks: map[string]Spark{}}
	v.Cells["updated"] = s.GeneratedAt.Format("15:04:05") + " UTC"
	v.Cells["window"] = strconv.FormatFloat(math.Round(s.WindowSeconds), 'f', 0, 64) + " s"
	v.Cells["warning"] = s.Warning
	v.Cells["live"] = "live"
	if !s.Redis.Reachable {
		since := "start"
		if s.Redis.LastOK != nil {
			since = s.Redis.LastOK.Format("15:04:05") + " UTC"
		}
		v.Cells["live"] = "Redis unreachable · figures stale since " + since
	}
	for _, d := range s.Downstreams {
		k := func(f string) string { return DownstreamKey(d.Name, f) }
		state := "running"
		switch {
		case !s.Redis.Reachable:
			state = "Redis unreachable"
		case d.Paused:
			state = "paused"
		case d.Adaptive != nil:
			state = "adaptive"
		}
		v.Cells[k("state")] = state
		v.Cells[k("configured")] = d.ConfiguredRate
		v.Cells[k("in_force")] = perSec(d.RatePerSecond)
		v.Cells[k("override")] = cmpOr(d.OverrideRate, "none")
		v.Cells[k("schedule")] = "none"
		if d.ScheduleChanges > 0 {
			v.Cells[k("schedule")] = fmt.Sprintf("%d changes", d.ScheduleChanges)
		}
		v.Cells[k("adaptive")] = "off"
		if a := d.Adaptive; a != nil {
			cur := "not moved yet"
			if a.RatePerSecond > 0 {
				cur = perSec(a.RatePerSecond)
			}
			v.Cells[k("adaptive")] = fmt.Sprintf("%s (%s … %s)", cur, a.Floor, a.Ceiling)
		}
		v.Cells[k("achieved")] = perSec(d.AchievedPerSecond)
		v.Cells[k("releases")] = count(d.ReleasesTotal)
		for _, st := range BacklogStates {
			if b, ok := d.Backlog[st]; ok {
				v.Cells[k("backlog_"+st)] = count(b)
			} else {
				v.Cells[k("backlog_"+st)] = "—"
			}
		}
		v.Cells[k("held")] = count(d.Held)
		v.Cells[k("leases")] = "no cap"
		if d.ConcurrencyLimit > 0 {
			v.Cells[k("leases")] = count(d.LeasesInUse) + " / " + count(d.ConcurrencyLimit)
		}
		v.Cells[k("workers")] = strconv.Itoa(d.Workers)
		v.Cells[k("max_wait")] = d.MaxWait
		v.Cells[k("late_p50")] = dur(d.Lateness.P50Seconds)
		v.Cells[k("late_p99")] = dur(d.Lateness.P99Seconds)
		v.Cells[k("late_mean")] = dur(d.Lateness.MeanSeconds)
		v.Cells[k("pushbacks")] = count(d.PushbacksTotal)
		v.Cells[k("bucket_full")] = count(d.BucketFullTotal)
		v.Cells[k("late_skips")] = count(d.LateSkipsTotal)
		v.Cells[k("deferrals")] = count(d.DeferralsTotal)
		v.Cells[k("enqueued")] = count(d.EnqueuedTotal)
		v.Cells[k("quarantined")] = count(d.QuarantinedTotal)
		v.Cells[k("quarantine_entries")] = count(d.QuarantineEntries)
		var outs []string
		for _, o := range sortedKeys(d.Outcomes) {
			outs = append(outs, o+" "+count(d.Outcomes[o]))
		}
		v.Cells[k("outcomes")] = cmpOr(strings.Join(outs, " · "), "none yet")
		v.Sparks[d.Name] = spark(d.PerSecond, d.RatePerSecond, int(math.Round(s.WindowSeconds/max(s.IntervalSeconds, 1e-9))))
	}
	for _, l := range s.Limiters {
		for _, o := range Outcomes {
			v.Cells[LimiterKey(l.Downstream, l.Name, o)] = count(l.Decisions[o])
		}
		v.Cells[LimiterKey(l.Downstream, l.Name, "fail_open")] = count(l.FailOpen)
	}
	for _, sc := range s.Scripts {
		v.Cells[ScriptKey(sc.Script, "calls")] = count(sc.CallsTotal)
		v.Cells[ScriptKey(sc.Script, "errors")] = count(sc.ErrorsTotal)
		v.Cells[ScriptKey(sc.Script, "p99")] = dur(sc.P99Seconds)
	}
	return v
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
