package statuspage

import (
	"fmt"
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
	// Display reads it as a person would: "100000 per 24h, windows from
	// 00:00:00 UTC".
	Display string `json:"display"`
	Used    int64  `json:"used"`
	Limit   int64  `json:"limit"`
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
		qs := QuotaSnapshot{Quota: q.Quota.String(), Display: humanQuota(q.Quota), Used: q.Used, Limit: q.Quota.Limit}
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

// secs reads a number of seconds as a person would: "45 s", "3m 20s",
// "17h 2m", "2d 4h".
func secs(v float64) string {
	d := time.Duration(max(v, 0) * float64(time.Second)).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%.0f s", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
}

// humanQuota reads a quota as a person would: "100000 per 24h, windows
// from 00:00 UTC", "5000 per 1h sliding".
func humanQuota(q shaping.Quota) string {
	s := fmt.Sprintf("%d per %s", q.Limit, shortDuration(q.Per))
	if !q.Aligned {
		return s + " sliding"
	}
	return s + ", windows from " + time.Unix(0, 0).UTC().Add(q.Offset).Format("15:04:05 UTC")
}

// shortDuration drops a Duration's zero units: 24h, 1h30m, 90s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// limitCells formats the quotas, the announced limit and the settled
// cost.
func limitCells(cells map[string]string, d DownstreamSnapshot) {
	k := func(f string) string { return DownstreamKey(d.Name, f) }
	var qs []string
	for _, q := range d.Quotas {
		s := fmt.Sprintf("%s: %d of %d used", cmpOr(q.Display, q.Quota), q.Used, q.Limit)
		if q.ResetInSeconds != nil {
			s += ", use falls in " + secs(*q.ResetInSeconds)
		}
		qs = append(qs, s)
	}
	cells[k("quotas")] = cmpOr(strings.Join(qs, " · "), "none")
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
	cells[k("settled")] = fmt.Sprintf("+%s charged / −%s refunded", count(d.SettledChargedTotal), count(d.SettledRefundedTotal))
}
