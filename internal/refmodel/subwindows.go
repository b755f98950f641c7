package refmodel

import "math"

// SubWindows models sliding_subwindows.lua: the sliding counter over N
// sub-windows per window, one HASH per key (a field per sub-window number).
type SubWindows struct {
	n int64
	h map[string]map[int64]int64
}

// NewSubWindows returns an empty model of the counter with n sub-windows.
func NewSubWindows(n int64) *SubWindows {
	return &SubWindows{n: n, h: map[string]map[int64]int64{}}
}

// floorDiv and ceilDiv are the script's exact fdiv and cdiv (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func ceilDiv(a, b int64) int64 { return -floorDiv(-a, b) }

func (m *SubWindows) Do(now int64, key string, limit, window, cost int64, mode int, token int64) Reply {
	n := m.n
	h := m.h[key]
	if h == nil {
		h = map[int64]int64{}
		m.h[key] = h
	}
	if mode == Refund {
		if c := h[token]; c > 0 {
			if c <= cost {
				delete(h, token)
			} else {
				h[token] = c - cost
			}
		}
		return Reply{1, 0, 0, 0, token}
	}
	// now*n = g*window + elapsed
	q := floorDiv(now, window)
	i := floorDiv((now-q*window)*n, window)
	elapsed := (now-q*window)*n - i*window
	g := q*n + i
	cnt := map[int64]int64{} // d = field - (g-n)
	top := int64(-1)
	var stale []int64
	for j, v := range h {
		d := j - g + n
		switch {
		case d < 0:
			stale = append(stale, j)
		case v > 0:
			cnt[d] = v
			top = max(top, d)
		}
	}
	old, sum := cnt[0], int64(0)
	for d := int64(1); d <= n; d++ {
		sum += cnt[d]
	}
	weighted := old * (window - elapsed)
	resetAfter := func(t int64) int64 {
		if t < 0 {
			return 0
		}
		return ceilDiv((t+1)*window-elapsed, n)
	}
	if weighted+(sum+cost)*window > limit*window {
		retry := (top+2)*window - elapsed
		o, s := old, sum
		for k := int64(0); k <= top+1; k++ {
			if room := limit - cost - s; room >= 0 {
				x := int64(0)
				if o > room {
					x = int64(math.Ceil(float64(window) - float64(room*window)/float64(o)))
				}
				if x < window && (k > 0 || x > elapsed) {
					retry = k*window + x - elapsed
					break
				}
			}
			o = cnt[k+1]
			s = s - o + cnt[k+n+1]
		}
		retry = max(ceilDiv(retry, n), 1)
		rem := floorDiv(limit*window-weighted-sum*window, window)
		return Reply{0, max(rem, 0), retry, resetAfter(top), g}
	}
	rem := floorDiv(limit*window-weighted-(sum+cost)*window, window)
	if mode == Peek || cost == 0 {
		return Reply{1, max(rem, 0), 0, resetAfter(top), g}
	}
	for _, j := range stale {
		delete(h, j)
	}
	h[g] += cost
	return Reply{1, max(rem, 0), 0, resetAfter(max(top, n)), g}
}
