package statuspage

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shaper-io/shaper/shaping"
)

// mSettled is the settled-cost counter the page reads.
const mSettled = "shaper_shaping_settled_cost_units_total"

// QuotaSnapshot is one of a downstream's quotas as this process's last
// reservation saw it.
type QuotaSnapshot struct {
	// Quota reads like "5000/1h0m0s" (sliding) or "100000/24h0m0s@0s".
	Quota string `json:"quota"`
	// Display reads it as a person would: "100,000 per day from 00:00
	// UTC", "5,000 per hour (sliding)".
	Display string `json:"display"`
	// Aligned is true for fixed windows (the use resets at once), false
	// for a sliding one (the use falls as units leave the window).
	Aligned bool  `json:"aligned"`
	Used    int64 `json:"used"`
	Limit   int64 `json:"limit"`
	// ResetInSeconds is how long until the use next falls; nil when
	// nothing counts.
	ResetInSeconds *float64 `json:"reset_in_seconds,omitempty"`
}

// AnnouncedSnapshot is the last limit the downstream's answers announced
// to this process that bound it.
type AnnouncedSnapshot struct {
	// Source is the header: ratelimit, x-ratelimit or retry-after.
	Source    string `json:"source"`
	Remaining int64  `json:"remaining"`
	Limit     int64  `json:"limit,omitempty"`
	// Left is what the announcement left after the units reserved since.
	Left int64 `json:"left"`
	// ResetInSeconds is how long until its window resets (0: past).
	ResetInSeconds float64 `json:"reset_in_seconds"`
	// Effect is hold, pace or stale.
	Effect string `json:"effect"`
	// Header is the answer's field lines it was read from.
	Header string `json:"header,omitempty"`
}

// ClampSnapshot is the last answer of the downstream whose hold or cost
// this process cut (to max_hold, to the cost cap) or refused.
type ClampSnapshot struct {
	// What is hold, cost_high or cost_low.
	What string `json:"what"`
	// Header is the field that said it; Said what it asked; Applied what
	// was applied instead ("" when refused).
	Header  string `json:"header"`
	Said    string `json:"said"`
	Applied string `json:"applied,omitempty"`
	// AgoSeconds is how long ago this process saw it.
	AgoSeconds float64 `json:"ago_seconds"`
}

// limits fills d's quotas, what held the last reservation, the announced
// limit and pace, and the settled cost, from the dispatcher's cache and
// the metrics.
func (p *Page) limits(d *DownstreamSnapshot, f families, now time.Time) {
	l, err := p.opts.Dispatcher.Limits(d.Name)
	if err != nil {
		return
	}
	for _, q := range l.Quotas {
		qs := QuotaSnapshot{Quota: q.Quota.String(), Display: humanQuota(q.Quota), Aligned: q.Quota.Aligned, Used: q.Used, Limit: q.Quota.Limit}
		if !q.Reset.IsZero() {
			s := max(q.Reset.Sub(now).Seconds(), 0)
			qs.ResetInSeconds = &s
		}
		d.Quotas = append(d.Quotas, qs)
	}
	d.HeldBy, d.AnnouncedPacePerSecond = l.HeldBy, l.Pace
	if a := l.Announced; a.Source != "" {
		d.Announced = &AnnouncedSnapshot{Source: a.Source, Remaining: a.Remaining, Limit: a.Limit, Left: a.Left,
			ResetInSeconds: max(a.Reset.Sub(now).Seconds(), 0), Effect: a.Effect, Header: a.Header}
	}
	if c := l.Clamp; c.What != "" {
		d.Clamp = &ClampSnapshot{What: c.What, Header: c.Header, Said: c.Said, Applied: c.Applied,
			AgoSeconds: max(now.Sub(c.At).Seconds(), 0)}
	}
	ls := map[string]string{"downstream": d.Name}
	ls["direction"] = "charged"
	d.SettledChargedTotal = f.counter(mSettled, ls)
	ls["direction"] = "refunded"
	d.SettledRefundedTotal = f.counter(mSettled, ls)
}

// secs reads a number of seconds as a person would: "45 s", "3 m 20 s",
// "17 h 02 m", "2 d 04 h".
func secs(v float64) string {
	d := time.Duration(max(v, 0) * float64(time.Second)).Round(time.Second)
	h := int(d.Hours())
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%.0f s", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%d m %02d s", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%d h %02d m", h, int(d.Minutes())%60)
	}
	return fmt.Sprintf("%d d %02d h", h/24, h%24)
}

// humanQuota reads a quota as a person would: "100,000 per day from
// 00:00 UTC", "5,000 per hour (sliding)".
func humanQuota(q shaping.Quota) string {
	s := thousands(q.Limit) + " per " + period(q.Per)
	if !q.Aligned {
		return s + " (sliding)"
	}
	at := time.Unix(0, 0).UTC().Add(q.Offset)
	layout := "15:04"
	if at.Second() != 0 || at.Nanosecond() != 0 {
		layout = "15:04:05.999"
	}
	return s + " from " + at.Format(layout) + " UTC"
}

// period reads a window's length in words: "day", "hour", "10 minutes",
// "7 days", "1.5s".
func period(d time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{7 * 24 * time.Hour, "week"}, {24 * time.Hour, "day"}, {time.Hour, "hour"}, {time.Minute, "minute"}, {time.Second, "second"}} {
		switch {
		case d == u.d:
			return u.name
		case d%u.d == 0:
			return fmt.Sprintf("%d %ss", d/u.d, u.name)
		}
	}
	return d.String()
}

// thousands writes n with a comma between groups of three digits.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// quotaText is one quota's line: "100,000 per day from 00:00 UTC · 132
// used · resets in 17 h 02 m" (a sliding quota's use "falls" instead: its
// oldest units leave the window).
func quotaText(q QuotaSnapshot) string {
	s := fmt.Sprintf("%s · %s used", cmpOr(q.Display, q.Quota), thousands(q.Used))
	switch {
	case q.ResetInSeconds == nil:
	case q.Aligned:
		s += " · resets in " + secs(*q.ResetInSeconds)
	default:
		s += " · use falls in " + secs(*q.ResetInSeconds)
	}
	return s
}

// limitCells formats the quotas, the announced limit and the settled
// cost.
func limitCells(cells map[string]string, d DownstreamSnapshot) {
	k := func(f string) string { return DownstreamKey(d.Name, f) }
	var qs []string
	for _, q := range d.Quotas {
		qs = append(qs, quotaText(q))
	}
	cells[k("quotas")] = cmpOr(strings.Join(qs, "; "), "none")
	cells[k("announced")] = "none"
	if a := d.Announced; a != nil {
		s := fmt.Sprintf("%s: %d left", a.Source, a.Remaining)
		if a.Limit > 0 {
			s = fmt.Sprintf("%s: %d of %d left", a.Source, a.Remaining, a.Limit)
		}
		s += fmt.Sprintf(" (%d after what was reserved since), resets in %s: %s", a.Left, secs(a.ResetInSeconds), a.Effect)
		if a.Header != "" {
			s += " · " + a.Header
		}
		cells[k("announced")] = s
	}
	if d.AnnouncedPacePerSecond > 0 {
		cells[k("announced")] = "paced at " + perSec(d.AnnouncedPacePerSecond) + " · " + cells[k("announced")]
	}
	cells[k("clamp")] = "none"
	if c := d.Clamp; c != nil {
		s := fmt.Sprintf("%s %s ago: %s said %s", c.What, secs(c.AgoSeconds), c.Header, c.Said)
		if c.Applied != "" {
			s += ", applied " + c.Applied
		}
		cells[k("clamp")] = s
	}
	var settled []string
	if d.SettledChargedTotal > 0 {
		settled = append(settled, "+"+count(d.SettledChargedTotal)+" charged")
	}
	if d.SettledRefundedTotal > 0 {
		settled = append(settled, "−"+count(d.SettledRefundedTotal)+" refunded")
	}
	cells[k("settled")] = cmpOr(strings.Join(settled, " · "), "none")
}

// HumanDuration reads d as the page does ("45 s", "17 h 02 m").
func HumanDuration(d time.Duration) string { return secs(d.Seconds()) }
