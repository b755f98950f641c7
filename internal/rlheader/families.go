package rlheader

import (
	"strings"
	"time"
)

// xPrefixes are the X-RateLimit families Parse reads, each its own Limit.
var xPrefixes = []string{"X-RateLimit-", "X-Rate-Limit-"}

// structured reads a RateLimit field named field: a draft 07 dictionary,
// or a draft 08 list of items whose quotas and windows are the items of
// the same name in policyField.
func (r *reader) structured(field, policyField, source string) {
	vs := r.values(field)
	if len(vs) == 0 {
		return
	}
	ms := members(strings.Join(vs, ","))
	if r.dictionary(ms, field, source) {
		return
	}
	pol := policies(r.values(policyField))
	for _, m := range ms {
		name, params, ok := item(m)
		if !ok {
			continue
		}
		rem, ok1 := fewest([]string{params["r"]})
		reset, _, ok2 := r.longest([]string{params["t"]}, formS)
		if !ok1 || !ok2 {
			continue
		}
		var b strings.Builder
		line(&b, field, m)
		p, found := pol[name]
		if found {
			line(&b, policyField, p.member)
		}
		r.emit(Limit{Remaining: rem, Reset: reset, Limit: p.quota, Window: p.window, Source: source}, b.String())
	}
}

// dictionary reads ms as a draft 07 dictionary (limit, remaining and
// reset keys; a key given twice reads its strictest value). It is false
// when ms has none of those keys.
func (r *reader) dictionary(ms []string, field, source string) bool {
	dict := map[string][]string{}
	for _, m := range ms {
		k, v, ok := strings.Cut(m, "=")
		if k = strings.ToLower(strings.TrimSpace(k)); ok && (k == "limit" || k == "remaining" || k == "reset") {
			dict[k] = append(dict[k], v)
		}
	}
	if len(dict) == 0 {
		return false
	}
	rem, ok1 := fewest(dict["remaining"])
	reset, _, ok2 := r.longest(dict["reset"], formS)
	if ok1 && ok2 {
		lim, _ := quota(dict["limit"])
		r.emit(Limit{Remaining: rem, Reset: reset, Limit: lim, Source: source}, r.lines(false, field))
	}
	return true
}

// policy is one RateLimit-Policy item: its quota, its window and the
// member it was read from.
type policy struct {
	quota  int64
	window time.Duration
	member string
}

// policies reads RateLimit-Policy items by name (draft 08 on:
// "name";q=;w=); of two of one name, the one with the smaller quota.
func policies(lines []string) map[string]policy {
	out := map[string]policy{}
	for _, m := range members(strings.Join(lines, ",")) {
		name, params, ok := item(m)
		if !ok {
			continue
		}
		p := policy{member: m}
		if q, ok := number(params["q"]); ok {
			p.quota = toUnits(q)
		}
		if w, ok := number(params["w"]); ok {
			p.window = bound(w)
		}
		if old, dup := out[name]; dup && old.quota > 0 && old.quota <= p.quota {
			continue
		}
		out[name] = p
	}
	return out
}

// fields reads RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset
// (drafts 00-06).
func (r *reader) fields() {
	rem, ok := fewest(r.values("RateLimit-Remaining"))
	if !ok {
		return
	}
	reset, abs, ok := r.longest(r.values("RateLimit-Reset"), formAuto)
	if !ok {
		return
	}
	lim, _ := quota(r.values("RateLimit-Limit"))
	r.emit(Limit{Remaining: rem, Reset: reset, Limit: lim, Source: SourceRateLimit},
		r.lines(abs, "RateLimit-Remaining", "RateLimit-Limit", "RateLimit-Reset"))
}

// xRateLimit reads the X-RateLimit family under prefix p: Reset-After,
// a delay, when it reads, else Reset.
func (r *reader) xRateLimit(p string) {
	rem, ok := fewest(r.values(p + "Remaining"))
	if !ok {
		return
	}
	resetName := p + "Reset-After"
	reset, abs, ok := r.longest(r.values(resetName), formS)
	if !ok {
		resetName = p + "Reset"
		if reset, abs, ok = r.longest(r.values(resetName), formAuto); !ok {
			return
		}
	}
	lim, _ := quota(r.values(p + "Limit"))
	r.emit(Limit{Remaining: rem, Reset: reset, Limit: lim, Source: SourceXRateLimit},
		r.lines(abs, p+"Remaining", p+"Limit", resetName))
}

// retryAfter reads Retry-After: nothing left until then.
func (r *reader) retryAfter() {
	if d, abs, ok := r.longest(r.values("Retry-After"), formDelay); ok {
		r.emit(Limit{Reset: d, Source: SourceRetryAfter}, r.lines(abs, "Retry-After"))
	}
}
