package shaping

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

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
