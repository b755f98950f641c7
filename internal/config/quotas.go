package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/shaper-io/shaper/internal/quota"
)

// Quota is a budget the downstream's releases never pass, beside its rate:
// at most Limit units per Per, e.g. {limit: 5000, per: 1h}. A release needs
// room in every quota of its downstream; when one is spent, tasks wait in
// the queue until it refills.
type Quota struct {
	// Limit is the units allowed per window, at least 1.
	Limit int64 `yaml:"limit"`
	// Per is the window's length, 1s to 366 days (whole milliseconds).
	Per Duration `yaml:"per"`
	// Align makes the windows fixed, starting at a time of day: "HH:MM",
	// "HH:MM:SS", optionally followed by UTC (the default) or a fixed
	// offset such as +02:00 (named zones are refused: their offset moves
	// with daylight saving). Per must divide a day. Left out, the quota is
	// sliding: no window of Per holds more than Limit.
	Align string `yaml:"align,omitempty"`
	// Spread paces releases at Limit/Per at most, so the quota lasts its
	// window instead of being spent at the full rate and waited out.
	Spread bool `yaml:"spread,omitempty"`
	// Margin is how much network jitter a release may add after its slot
	// and still count in its slot's window. Default 20ms
	// (shaping.DefaultQuotaMargin), at most Per/4.
	Margin Duration `yaml:"margin,omitempty"`
}

// day is the span an aligned quota's period must divide.
const day = 24 * time.Hour

var (
	reAlign   = regexp.MustCompile(`^(\d{1,2}):(\d{2})(?::(\d{2}))?(?:\s+(\S+))?$`)
	reOffset  = regexp.MustCompile(`^([+-])(\d{2}):?(\d{2})$`)
	reJSONKey = regexp.MustCompile(`^[^.\s]+(\.[^.\s]+)*$`)
)

// Offset is where aligned windows start: Align's time of day in UTC,
// modulo Per (the windows start at Offset + k × Per from the Unix epoch).
// ok is false for a sliding quota (no Align) or an Align that does not
// parse, which Validate reports.
func (q Quota) Offset() (off time.Duration, ok bool) {
	off, err := alignOffset(q.Align, time.Duration(q.Per))
	return off, err == nil && q.Align != ""
}

// alignOffset parses align ("" is no alignment: 0).
func alignOffset(align string, per time.Duration) (time.Duration, error) {
	if align == "" {
		return 0, nil
	}
	m := reAlign.FindStringSubmatch(strings.TrimSpace(align))
	if m == nil {
		return 0, fmt.Errorf("want a time of day HH:MM[:SS], optionally followed by UTC or an offset such as +02:00")
	}
	h, _ := strconv.Atoi(m[1])
	mi, _ := strconv.Atoi(m[2])
	s, _ := strconv.Atoi(m[3])
	if h > 23 || mi > 59 || s > 59 {
		return 0, fmt.Errorf("no such time of day")
	}
	tod := time.Duration(h)*time.Hour + time.Duration(mi)*time.Minute + time.Duration(s)*time.Second
	switch z := m[4]; {
	case z == "" || z == "UTC" || z == "Z" || z == "GMT":
	case reOffset.MatchString(z):
		o := reOffset.FindStringSubmatch(z)
		oh, _ := strconv.Atoi(o[2])
		om, _ := strconv.Atoi(o[3])
		d := time.Duration(oh)*time.Hour + time.Duration(om)*time.Minute
		if oh > 14 || om > 59 {
			return 0, fmt.Errorf("offset %s is out of range", z)
		}
		if o[1] == "+" {
			tod -= d // 00:00 +02:00 is 22:00 UTC
		} else {
			tod += d
		}
	default:
		return 0, fmt.Errorf("zone %s: want UTC or a fixed offset such as +02:00 (a named zone's offset moves with daylight saving)", z)
	}
	if per <= 0 {
		return 0, nil
	}
	return ((tod % per) + per) % per, nil
}

// validateQuotas checks what the file says of the downstream's quotas
// (per given, align), then the one rule for quotas (quota.Check),
// named at its YAML path.
func (d *Downstream) validateQuotas(p string) *Error {
	for i, qt := range d.Quotas {
		qp := fmt.Sprintf("%s.quotas[%d]", p, i)
		per := time.Duration(qt.Per)
		if qt.Per == 0 {
			return errf(qp+".per", "required (e.g. 1h)")
		}
		if _, err := alignOffset(qt.Align, per); err != nil {
			return errf(qp+".align", "invalid alignment %s: %v", q(qt.Align), err)
		}
		if qt.Align != "" && per > 0 && day%per != 0 {
			return errf(qp+".align", "set with per %s, which does not divide a day: the windows could not start at one time of day", qt.Per)
		}
	}
	if pr := quota.Check(d.QuotasModel(), d.MaxReleaseCost()); pr != nil {
		return errf(p+"."+pr.Field, "%s", pr.Msg)
	}
	return d.Handler.validateCost(p + ".handler")
}

// QuotasModel is d's quotas as the dispatcher takes them.
func (d *Downstream) QuotasModel() []quota.Quota {
	var out []quota.Quota
	for _, q := range d.Quotas {
		off, aligned := q.Offset()
		out = append(out, quota.Quota{Limit: q.Limit, Per: time.Duration(q.Per), Aligned: aligned, Offset: off,
			Spread: q.Spread, Margin: time.Duration(q.Margin)})
	}
	return out
}

// validateCost checks cost_header and cost_json (http handlers only).
func (h *Handler) validateCost(p string) *Error {
	if h.Type != HandlerHTTP {
		return h.onlyFor(p, HandlerHTTP, []typeField{{"cost_header", h.CostHeader != ""}, {"cost_json", h.CostJSON != ""}})
	}
	if h.CostHeader != "" && !reToken.MatchString(h.CostHeader) {
		return errf(p+".cost_header", "invalid header name %s", q(h.CostHeader))
	}
	if h.CostJSON != "" && !reJSONKey.MatchString(h.CostJSON) {
		return errf(p+".cost_json", "invalid path %s (want keys joined by dots, e.g. data.cost)", q(h.CostJSON))
	}
	return nil
}
