package shaping

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/clocktest"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/testutil"
	"github.com/shaper-io/shaper/limiters"
)

// A process that joins or leaves the fleet says so (keys.ProcessesChannel),
// and the others count the live processes at once: on a clock that never
// moves, so no timed announce runs, each process's count (the lanes'
// share of the look-ahead, the take budget) follows every join and the
// leave. Before, a process counted every 2 s only: in shaperbench's
// fairscale round the three processes went on seeing 1, 2 and 3 live
// processes, the first holding three times its share of the look-ahead.
func TestFleetJoinAndLeaveAreCountedAtOnce(t *testing.T) {
	if redistest.Cluster() {
		t.Skip("counts subscribers with PUBSUB NUMSUB, which a cluster node answers for itself")
	}
	rdb := redistest.Own(t)
	clk := clocktest.New(time.Now()) // never advanced
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	channel := keys.New("fleet").ProcessesChannel()
	subscribers := func() int64 {
		n, err := rdb.PubSubNumSub(context.Background(), channel).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n[channel]
	}
	var ds []*Dispatcher
	counts := func(want int64) func() bool {
		return func() bool {
			for _, d := range ds {
				if d.procs.Load() != want {
					return false
				}
			}
			return true
		}
	}
	for i := range 3 {
		d := New(rdb, Config{Prefix: "fleet", Logger: quiet, Clock: clk})
		if err := d.Add(Downstream{Name: "api", Rate: limiters.PerSecond(10), Handler: LogHandler(t.Logf)}); err != nil {
			t.Fatal(err)
		}
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Shutdown(context.Background()) })
		ds = append(ds, d)
		testutil.WaitFor(t, 2*time.Second, "every process counting the one that joined", counts(int64(i+1)))
		// the next join is heard only by subscribed processes
		testutil.WaitFor(t, 2*time.Second, "every process subscribed", func() bool { return subscribers() == int64(i+1) })
	}
	if err := ds[2].Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	ds = ds[:2]
	testutil.WaitFor(t, 2*time.Second, "the others counting the one that left", counts(2))
}

// The liveness loop looks again when another process's silence reaches
// RecoverAfter, if that comes before its next announce, and every
// scanEvery just after it found one dead.
func TestNextCheck(t *testing.T) {
	for _, c := range []struct {
		i       int
		staleIn time.Duration
		fast    bool
		want    time.Duration
	}{
		{0, 0, false, 250 * time.Millisecond},
		{2, 0, false, time.Second},
		{3, 0, false, livenessInterval},
		{3, 6 * time.Second, false, livenessInterval},
		{3, 700 * time.Millisecond, false, 710 * time.Millisecond},
		{3, 0, true, scanEvery},
		{3, 100 * time.Millisecond, true, 110 * time.Millisecond},
		{0, 0, true, 250 * time.Millisecond},
	} {
		if got := nextCheck(c.i, c.staleIn, c.fast); got != c.want {
			t.Errorf("nextCheck(%d, %v, %v) = %v, want %v", c.i, c.staleIn, c.fast, got, c.want)
		}
	}
}

// announce says when the most silent other process turns stale: the
// first second at which now - RecoverAfter passes its score.
func TestAnnounceSaysWhenTheSilentTurnStale(t *testing.T) {
	rdb := redistest.Own(t)
	var procs atomic.Int64
	v := &liveness{rdb: rdb, space: keys.New("live"), pid: "me", recoverAfter: 7 * time.Second, procs: &procs}
	ctx := context.Background()
	now := time.Now()
	ghost := now.Unix() - 5
	if err := rdb.ZAdd(ctx, v.space.Processes(), redis.Z{Score: float64(ghost), Member: "ghost"}).Err(); err != nil {
		t.Fatal(err)
	}
	gone, staleIn, err := v.announce(ctx, false)
	if err != nil || gone != 0 || procs.Load() != 2 {
		t.Fatalf("announce = %d gone, %v; %d live; want 0, nil; 2", gone, err, procs.Load())
	}
	want := time.Unix(ghost+1, 0).Add(7 * time.Second).Sub(now)
	if d := staleIn - want; d > 50*time.Millisecond || d < -50*time.Millisecond {
		t.Errorf("staleIn %v, want about %v (the ghost's score %d + 1 s + RecoverAfter)", staleIn, want, ghost)
	}
	if err := rdb.ZAdd(ctx, v.space.Processes(), redis.Z{Score: float64(now.Unix() - 9), Member: "ghost"}).Err(); err != nil {
		t.Fatal(err)
	}
	if gone, staleIn, err = v.announce(ctx, false); err != nil || gone != 1 || staleIn != 0 || procs.Load() != 1 {
		t.Errorf("announce after 9 s of silence = %d gone, staleIn %v, %v; %d live; want 1, 0, nil; 1", gone, staleIn, err, procs.Load())
	}
}
