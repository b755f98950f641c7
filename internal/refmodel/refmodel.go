// Package refmodel holds pure-Go reference models of shaper's Lua scripts,
// with time as an explicit argument. Each model performs the same arithmetic
// in the same order as its script (float64 where Lua uses doubles), so a
// differential test can demand identical replies, field by field.
package refmodel

import (
	"fmt"
	"math"
	"sort"
)

// Reply mirrors an admission script's reply:
// {allowed, remaining, retry_after_us, reset_after_us, token}.
type Reply [5]int64

// Modes, as in package lua.
const (
	Charge = 0
	Peek   = 1
	Refund = 2
)

// Model is one algorithm's state for many keys.
type Model interface {
	// Do runs one script call: a1, a2 and cost are the script's ARGV[1..3]
	// (already scaled), token is ARGV[6] for refunds.
	Do(now int64, key string, a1, a2, cost int64, mode int, token int64) Reply
}

// New returns the model of the named algorithm ("fixed_window", …).
func New(alg string) Model {
	switch alg {
	case "fixed_window":
		return &FixedWindow{c: map[string]int64{}}
	case "sliding_log":
		return &SlidingLog{z: map[string][]int64{}}
	case "sliding_counter":
		return &SlidingCounter{c: map[string]int64{}}
	case "token_bucket":
		return &TokenBucket{s: map[string]bucket{}}
	case "leaky_bucket":
		return &LeakyBucket{s: map[string]bucket{}}
	}
	panic("refmodel: unknown algorithm " + alg)
}

func ceil(x float64) int64  { return int64(math.Ceil(x)) }
func floor(x float64) int64 { return int64(math.Floor(x)) }

// refundWindow gives cost back to the window token (the window number the
// decision returned) of key, as fixed_window.lua and sliding_counter.lua
// refund: never below zero.
func refundWindow(c map[string]int64, key string, cost, token int64) Reply {
	k := fmt.Sprint(key, ":", token)
	if n := c[k]; n > 0 {
		c[k] = n - min(n, cost)
	}
	return Reply{1, 0, 0, 0, token}
}

// FixedWindow models fixed_window.lua.
type FixedWindow struct{ c map[string]int64 }

func (m *FixedWindow) Do(now int64, key string, limit, window, cost int64, mode int, token int64) Reply {
	if mode == Refund {
		return refundWindow(m.c, key, cost, token)
	}
	n := floor(float64(now) / float64(window))
	k := fmt.Sprint(key, ":", n)
	count := m.c[k]
	reset := (n+1)*window - now
	if count+cost > limit {
		return Reply{0, max(limit-count, 0), reset, reset, n}
	}
	if mode == Peek || cost == 0 {
		return Reply{1, limit - count - cost, 0, reset, n}
	}
	m.c[k] = count + cost
	return Reply{1, limit - m.c[k], 0, reset, n}
}

// SlidingLog models sliding_log.lua. Only scores matter for decisions.
type SlidingLog struct{ z map[string][]int64 }

func (m *SlidingLog) Do(now int64, key string, limit, window, cost int64, mode int, token int64) Reply {
	z := m.z[key]
	if mode == Refund {
		out := z[:0:0]
		removed := int64(0)
		for _, s := range z {
			if s == token && removed < cost {
				removed++
				continue
			}
			out = append(out, s)
		}
		m.z[key] = out
		return Reply{1, 0, 0, 0, token}
	}
	var live []int64
	for _, s := range z {
		if s > now-window {
			live = append(live, s)
		}
	}
	if mode != Peek {
		z = live
		m.z[key] = z
	}
	count := int64(len(live))
	resetAfter := func(extra bool) int64 {
		r := int64(0)
		if len(z) > 0 {
			r = z[len(z)-1] + window - now
		}
		if extra && window > r {
			r = window
		}
		return max(r, 0)
	}
	if count+cost > limit {
		need := count + cost - limit
		retry := window
		if need-1 < int64(len(live)) {
			retry = live[need-1] + window - now
		}
		retry = max(retry, 1)
		return Reply{0, max(limit-count, 0), retry, resetAfter(false), now}
	}
	if mode == Peek || cost == 0 {
		return Reply{1, limit - count - cost, 0, resetAfter(false), now}
	}
	for i := int64(0); i < cost; i++ {
		z = append(z, now)
	}
	sort.Slice(z, func(i, j int) bool { return z[i] < z[j] })
	m.z[key] = z
	return Reply{1, limit - count - cost, 0, resetAfter(true), now}
}

// SlidingCounter models sliding_counter.lua.
type SlidingCounter struct{ c map[string]int64 }

func (m *SlidingCounter) Do(now int64, key string, limit, window, cost int64, mode int, token int64) Reply {
	if mode == Refund {
		return refundWindow(m.c, key, cost, token)
	}
	n := floor(float64(now) / float64(window))
	elapsed := now - n*window
	cur := m.c[fmt.Sprint(key, ":", n)]
	prev := m.c[fmt.Sprint(key, ":", n-1)]
	weighted := prev * (window - elapsed)
	resetAfter := func(c int64) int64 {
		if c > 0 {
			return 2*window - elapsed
		}
		if prev > 0 {
			return window - elapsed
		}
		return 0
	}
	if weighted+(cur+cost)*window > limit*window {
		var retry int64
		room := limit - cur - cost
		if room >= 0 && prev > 0 {
			retry = ceil(float64(window)-float64(room*window)/float64(prev)) - elapsed
		} else {
			retry = window - elapsed
			if cur > 0 {
				retry += max(0, ceil(float64(window)-float64((limit-cost)*window)/float64(cur)))
			}
		}
		retry = max(retry, 1)
		rem := floor(float64(limit*window-weighted-cur*window) / float64(window))
		return Reply{0, max(rem, 0), retry, resetAfter(cur), n}
	}
	if mode == Peek || cost == 0 {
		rem := floor(float64(limit*window-weighted-(cur+cost)*window) / float64(window))
		return Reply{1, max(rem, 0), 0, resetAfter(cur), n}
	}
	c := cur + cost
	m.c[fmt.Sprint(key, ":", n)] = c
	rem := floor(float64(limit*window-weighted-c*window) / float64(window))
	return Reply{1, max(rem, 0), 0, resetAfter(c), n}
}

type bucket struct{ v, ts int64 }

// TokenBucket models token_bucket.lua (a1 = capacity, a2 = refill per µs,
// both scaled).
type TokenBucket struct{ s map[string]bucket }

func (m *TokenBucket) Do(now int64, key string, capacity, rate, cost int64, mode int, _ int64) Reply {
	b, ok := m.s[key]
	tokens, ts := b.v, b.ts
	if !ok {
		tokens, ts = capacity, now
	}
	elapsed := max(now-ts, 0)
	if ts > now {
		now = ts
	}
	fill := ceil(float64(capacity-tokens) / float64(rate))
	if elapsed >= fill {
		tokens = capacity
	} else {
		tokens += elapsed * rate
	}
	tokens = min(tokens, capacity)
	save := func() {
		if tokens >= capacity {
			delete(m.s, key)
			return
		}
		m.s[key] = bucket{tokens, now}
	}
	reset := func() int64 { return ceil(float64(capacity-tokens) / float64(rate)) }
	if mode == Refund {
		tokens = min(capacity, tokens+cost)
		save()
		return Reply{1, tokens, 0, reset(), 0}
	}
	if tokens < cost {
		return Reply{0, tokens, ceil(float64(cost-tokens) / float64(rate)), reset(), 0}
	}
	if mode == Peek || cost == 0 {
		return Reply{1, tokens - cost, 0, reset(), 0}
	}
	tokens -= cost
	save()
	return Reply{1, tokens, 0, reset(), 0}
}

// LeakyBucket models leaky_bucket.lua (a1 = capacity, a2 = leak per µs,
// both scaled).
type LeakyBucket struct{ s map[string]bucket }

func (m *LeakyBucket) Do(now int64, key string, capacity, rate, cost int64, mode int, _ int64) Reply {
	b, ok := m.s[key]
	level, ts := b.v, b.ts
	if !ok {
		level, ts = 0, now
	}
	elapsed := max(now-ts, 0)
	if ts > now {
		now = ts
	}
	drain := ceil(float64(level) / float64(rate))
	if elapsed >= drain {
		level = 0
	} else {
		level -= elapsed * rate
	}
	level = max(level, 0)
	save := func() {
		if level <= 0 {
			delete(m.s, key)
			return
		}
		m.s[key] = bucket{level, now}
	}
	if mode == Refund {
		level = max(0, level-cost)
		save()
		return Reply{1, level, 0, ceil(float64(level) / float64(rate)), 0}
	}
	if level+cost > capacity {
		return Reply{0, level, ceil(float64(level+cost-capacity) / float64(rate)), ceil(float64(level) / float64(rate)), 0}
	}
	if mode == Peek || cost == 0 {
		return Reply{1, level + cost, 0, ceil(float64(level+cost) / float64(rate)), 0}
	}
	level += cost
	save()
	return Reply{1, level, 0, ceil(float64(level) / float64(rate)), 0}
}

// Shaping models shaping.lua. Reply: {reserved count, wait_us,
// next_free_us, now_us, base_us}.
type Shaping struct{ nf map[string]int64 }

// NewShaping returns an empty shaping model.
func NewShaping() *Shaping { return &Shaping{nf: map[string]int64{}} }

// Do runs one shaping call (maxWait < 0: no limit) reserving up to n slots.
func (m *Shaping) Do(now int64, key string, interval, burst, maxWait int64, mode int, n int64) [5]int64 {
	nf := m.nf[key]
	if mode == Refund {
		target := now + interval
		if nf < target {
			nf = target
			m.nf[key] = nf
		}
		return [5]int64{1, nf - now, nf, now, nf}
	}
	base := max(nf, now-burst)
	start := max(base, now)
	wait := start - now
	if maxWait >= 0 && wait > maxWait {
		return [5]int64{0, wait, nf, now, base}
	}
	if mode == Peek {
		return [5]int64{1, wait, base + interval, now, base}
	}
	count := min(max(n, 1), 1000)
	if maxWait >= 0 && interval > 0 && count > 1 {
		// slot j starts at max(base + j·interval, now): those within maxWait
		count = min(count, (now+maxWait-base)/interval+1)
	}
	m.nf[key] = base + count*interval
	return [5]int64{count, wait, base + count*interval, now, base}
}
