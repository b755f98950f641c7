package replay_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/replay"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/shaping"
)

// A downstream's quotas are applied: of eight tasks at 12:00:00 under
// 5 a minute (aligned) at 10/s, five take slots 100ms apart and the
// other three wait for the next minute, the first of them moved there by
// the quota. The report says which quotas it applied and what they held.
func TestReplayAppliesQuotas(t *testing.T) {
	t.Parallel()
	pl := planOf(t, `
downstreams:
  - name: api
    rate: 10/s
    quotas: [{limit: 5, per: 1m, align: "00:00 UTC"}]
    handler: {type: log}
`)
	t0 := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	var log strings.Builder
	for range 8 {
		fmt.Fprintf(&log, `{"ts":%d}`+"\n", t0.Unix())
	}
	ds, rep := run(t, pl, log.String(), replay.Options{})
	wantStart := []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 400 * time.Millisecond,
		time.Minute, time.Minute + 100*time.Millisecond, time.Minute + 200*time.Millisecond}
	for i, d := range ds {
		wantHeld := ""
		if i == 5 {
			wantHeld = "quota 5/1m0s@0s"
		}
		if d.Start == nil || d.Start.Sub(t0) != wantStart[i] || d.HeldBy != wantHeld {
			t.Errorf("task %d: start %v held by %q; want t0+%v, held by %q", i, d.Start, d.HeldBy, wantStart[i], wantHeld)
		}
	}
	s := rep.Downstreams[0]
	if len(s.Quotas) != 1 || s.HeldBy["quota 5/1m0s@0s"] != 1 || s.Wait.Max != 60.2 {
		t.Errorf("summary: quotas %v, held by %v, max wait %v; want the quota, 1 task held by it, 60.2s", s.Quotas, s.HeldBy, s.Wait.Max)
	}
	var out bytes.Buffer
	replay.Write(&out, pl, rep.Downstreams)
	for _, want := range []string{"downstream api (rate 10/s, quotas 5/1m0s@0s): 8 arrivals", "slots moved later by: quota 5/1m0s@0s 1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// The embedded Redis gives the reservations a real redis-server gives:
// the same slots, holds and quota counts for a run of tasks through a
// sliding, an aligned and a spread quota, and hourly and daily ones,
// whose window numbers are large table keys in the script.
func TestEmbeddedMatchesRedis(t *testing.T) {
	t.Parallel()
	e, err := replay.NewEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	prefix := redistest.Prefix(t)
	real, embedded := shaping.NewBuckets(redistest.Client(t), prefix), shaping.NewBuckets(e.Client(), prefix)
	b := shaping.Bucket{Name: "api", Rate: limiters.PerSecond(20), Burst: 3, LateTolerance: 10 * time.Millisecond, Quotas: []shaping.Quota{
		{Limit: 7, Per: 2 * time.Second}, {Limit: 12, Per: 5 * time.Second, Aligned: true}, {Limit: 900, Per: time.Minute, Spread: true},
		{Limit: 60, Per: time.Hour}, {Limit: 80, Per: 24 * time.Hour, Aligned: true}}}
	at := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	held := map[string]int{}
	for i := range 90 {
		at = at.Add(time.Duration(i%7) * 37 * time.Millisecond)
		cost := int64(1 + i%3)
		want, err := real.ReserveAt(context.Background(), at, b, cost, -1)
		if err != nil {
			t.Fatal(err)
		}
		got, err := embedded.ReserveAt(context.Background(), at, b, cost, -1)
		if err != nil {
			t.Fatal(err)
		}
		if g, w := fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", want); g != w {
			t.Fatalf("step %d (at %s, cost %d):\n embedded %s\n    redis %s", i, at.Format("15:04:05.000"), cost, g, w)
		}
		held[got.HeldBy]++
	}
	t.Logf("slots held by %v", held)
	if len(held) < 5 {
		t.Errorf("slots held by %v: the run does not exercise the quotas", held)
	}
}
