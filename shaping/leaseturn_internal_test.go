package shaping

import (
	"context"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
)

// Leases granted in one call queue for their slots in grant order: the
// second granted waits on the first's placed, the third on the second's.
func TestLeaseTurnsFollowGrantOrder(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	d := New(rdb, Config{Prefix: redistest.Prefix(t)})
	l := newLeaseLane(d.services, Downstream{Name: "api", Rate: limiters.PerSecond(10), KeyConcurrency: 1})
	ctx := context.Background()
	type res struct {
		lt  leaseTurn
		err error
	}
	got := make([]chan res, 3)
	for i, key := range []string{"a", "b", "c"} {
		got[i] = make(chan res, 1)
		go func() { lt, err := l.acquire(ctx, key); got[i] <- res{lt, err} }()
		// queued in this order before the lane asks
		for deadline := time.Now().Add(5 * time.Second); ; {
			l.mu.Lock()
			n := l.q.Len()
			l.mu.Unlock()
			if n == i+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d not queued", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if n := l.grant(l.waiting(), granted(l, t)); n != 3 {
		t.Fatalf("granted %d, want 3", n)
	}
	var turns []leaseTurn
	for i := range 3 {
		r := <-got[i]
		if r.err != nil {
			t.Fatal(r.err)
		}
		turns = append(turns, r.lt)
	}
	if turns[0].prev != nil {
		t.Errorf("the first granted waits on a turn")
	}
	for i := 1; i < 3; i++ {
		if turns[i].prev != turns[i-1].placed {
			t.Errorf("waiter %d waits on %v, want the placed of waiter %d", i, turns[i].prev, i-1)
		}
	}
	close(turns[0].placed)
	select {
	case <-turns[1].prev:
	default:
		t.Errorf("the second's turn did not come once the first was placed")
	}
	select {
	case <-turns[2].prev:
		t.Errorf("the third's turn came before the second was placed")
	default:
	}
}

// granted asks Redis for the lane's waiters' leases as its run loop does
// and returns the flags.
func granted(l *leaseLane, t *testing.T) []int64 {
	t.Helper()
	ws := l.waiting()
	members := make([]string, len(ws))
	for i, w := range ws {
		members[i] = w.member
	}
	v, err := l.call(context.Background(), "acquire", members)
	if err != nil || len(v) != len(ws)+1 {
		t.Fatalf("acquire: %v %v", v, err)
	}
	return v[:len(ws)]
}
