package refmodel

import (
	"fmt"
	"math/big"
	"math/rand"
	"testing"
)

// oracle is the sub-window counter by its definition, in exact rationals:
// sub-window j is [j*window/n, (j+1)*window/n) µs; at time t in sub-window
// g, fields g-n+1..g count in full and field g-n by the part of it still
// inside the window (1 - the elapsed fraction of g). It knows nothing of the
// script's scaled units, and finds Retry-After and Reset-After by trying
// every microsecond.
type oracle struct {
	n, window, limit int64
	c                map[int64]int64
}

func (o *oracle) sub(t int64) int64 { return floorDiv(t*o.n, o.window) }

func (o *oracle) estimate(t int64) *big.Rat {
	g := o.sub(t)
	e := big.NewRat(t*o.n-g*o.window, o.window) // elapsed fraction of g
	sum := new(big.Rat)
	for j, v := range o.c {
		switch {
		case j > g-o.n && j <= g:
			sum.Add(sum, big.NewRat(v, 1))
		case j == g-o.n:
			w := new(big.Rat).Sub(big.NewRat(1, 1), e)
			sum.Add(sum, w.Mul(w, big.NewRat(v, 1)))
		}
	}
	return sum
}

func (o *oracle) fits(t, cost int64) bool {
	need := new(big.Rat).Add(o.estimate(t), big.NewRat(cost, 1))
	return need.Cmp(big.NewRat(o.limit, 1)) <= 0
}

// floorRat is floor(limit - estimate - cost), at least 0.
func (o *oracle) remaining(t, cost int64) int64 {
	r := new(big.Rat).Sub(big.NewRat(o.limit-cost, 1), o.estimate(t))
	q := new(big.Int).Div(r.Num(), r.Denom()) // Euclidean: floor for a positive divisor
	return max(q.Int64(), 0)
}

func (o *oracle) idle(t int64) bool {
	g := o.sub(t)
	for j, v := range o.c {
		if v > 0 && j >= g-o.n {
			return false
		}
	}
	return true
}

func (o *oracle) do(now, cost int64, mode int, token int64) Reply {
	if mode == Refund {
		o.c[token] -= min(o.c[token], cost)
		return Reply{1, 0, 0, 0, token}
	}
	g := o.sub(now)
	for j := range o.c { // time only moves forward here: slid out for good
		if j < g-o.n {
			delete(o.c, j)
		}
	}
	reset := func() int64 {
		d := int64(0)
		for !o.idle(now + d) {
			d++
		}
		return d
	}
	if !o.fits(now, cost) {
		retry := int64(1)
		for !o.fits(now+retry, cost) {
			retry++
		}
		return Reply{0, o.remaining(now, 0), retry, reset(), g}
	}
	if mode == Charge && cost > 0 {
		o.c[g] += cost
	}
	rem := o.remaining(now, cost)
	if mode == Charge && cost > 0 {
		rem = o.remaining(now, 0)
	}
	return Reply{1, rem, 0, reset(), g}
}

func TestSubWindowsMatchesDefinition(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ n, window, limit int64 }{
		{1, 200, 5}, {2, 300, 7}, {3, 301, 10}, {7, 350, 4}, {10, 997, 20}, {60, 600, 30}, {13, 13, 3},
	} {
		t.Run(fmt.Sprintf("%d_per_%dus_N%d", tt.limit, tt.window, tt.n), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewSource(tt.n*1000 + tt.window))
			m := NewSubWindows(tt.n)
			o := &oracle{n: tt.n, window: tt.window, limit: tt.limit, c: map[int64]int64{}}
			now := int64(5_000_000) + rng.Int63n(tt.window)
			var open []Reply // charges not refunded: {cost, token}
			rejected := 0
			for i := 0; i < 1000; i++ {
				now += rng.Int63n(tt.window / 4)
				cost := 1 + rng.Int63n(tt.limit)
				if rng.Intn(2) == 0 {
					cost = 1
				}
				mode, token := Charge, int64(0)
				switch r := rng.Intn(10); {
				case r == 0 && len(open) > 0:
					j := rng.Intn(len(open))
					mode, cost, token = Refund, open[j][0], open[j][1]
					open = append(open[:j], open[j+1:]...)
				case r < 3:
					mode = Peek
				}
				got := m.Do(now, "k", tt.limit, tt.window, cost, mode, token)
				want := o.do(now, cost, mode, token)
				if got != want {
					t.Fatalf("step %d: now=%d cost=%d mode=%d token=%d: model %v, definition %v", i, now, cost, mode, token, got, want)
				}
				if mode == Charge && got[0] == 1 {
					open = append(open, Reply{cost, got[4]})
				}
				if got[0] == 0 {
					rejected++
				}
			}
			if rejected == 0 {
				t.Errorf("no rejection in 1000 steps: a weak sequence")
			}
		})
	}
}

// With one sub-window the counter is the two-window counter: its previous
// window is the weighted sub-window.
func TestSubWindowsOneIsTwoWindowCounter(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewSource(7))
	const limit, window = 10, 1_000_000
	one, two := NewSubWindows(1), New("sliding_counter")
	now := int64(1_700_000_000_000_000)
	var open [][2]int64
	for i := 0; i < 5000; i++ {
		now += rng.Int63n(window / 5)
		cost := 1 + rng.Int63n(3)
		mode, token := Charge, int64(0)
		switch r := rng.Intn(10); {
		case r == 0 && len(open) > 0:
			j := rng.Intn(len(open))
			mode, cost, token = Refund, open[j][0], open[j][1]
			open = append(open[:j], open[j+1:]...)
		case r < 3:
			mode = Peek
		}
		a := one.Do(now, "k", limit, window, cost, mode, token)
		b := two.Do(now, "k", limit, window, cost, mode, token)
		if a != b {
			t.Fatalf("step %d: now=%d cost=%d mode=%d: one sub-window %v, two-window counter %v", i, now, cost, mode, a, b)
		}
		if mode == Charge && a[0] == 1 {
			open = append(open, [2]int64{cost, a[4]})
		}
	}
}
