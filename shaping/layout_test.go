package shaping_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/testutil"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/shaping"
)

// A downstream's keys took its queue's hash tag (so that one script takes
// a task and reserves its slot): a process that starts on a Redis written
// by the earlier layout carries the lasting state over. A paused
// downstream stays paused and a quota keeps what it counted, with its
// TTL; state already in the new layout is newer and is left as it is. A
// bucket pushed an hour ahead keeps its pushback. A process of the
// earlier layout still releasing (its bucket exists) is warned of: it
// reserves on a bucket of its own.
func TestStateCarriesOverFromTheEarlierKeyLayout(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	sp := keys.New(prefix)
	q := shaping.Quota{Limit: 100, Per: time.Hour}
	old := map[string]keys.Moved{}
	for _, m := range sp.LegacyDownstream("api", q.Shape()) {
		old[m.New] = m
	}
	state, quota := old[sp.DownstreamState("api")], old[sp.Quota("api", q.Shape())]
	if state.Old == "" || quota.Old == "" || state.Old == state.New {
		t.Fatalf("legacy keys: %+v", old)
	}
	must(t, rdb.HSet(ctx, state.Old, "paused", "1").Err())
	must(t, rdb.HSet(ctx, quota.Old, "123", "7").Err())
	must(t, rdb.PExpire(ctx, quota.Old, time.Hour).Err())
	// the other downstream's rate was overridden in the new layout
	// already: its old state (paused) is older and stays behind
	must(t, rdb.HSet(ctx, sp.LegacyDownstream("web")[0].Old, "paused", "1").Err())
	must(t, shaping.NewControl(rdb, prefix).SetRate(ctx, "web", limiters.PerSecond(5)))

	// a process of the earlier layout is releasing api (its bucket
	// exists), after a pushback of an hour
	pushed := fmt.Sprint(time.Now().Add(time.Hour).UnixMicro())
	must(t, rdb.Set(ctx, sp.LegacyBucket("api"), pushed, time.Hour).Err())
	var logs testutil.SyncBuffer
	d := shaping.New(rdb, shaping.Config{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	h := func(context.Context, *shaping.Task) error { return nil }
	must(t, d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(10), Quotas: []shaping.Quota{q}, Handler: h}))
	must(t, d.Add(shaping.Downstream{Name: "web", Rate: limiters.PerSecond(10), Handler: h}))
	must(t, d.Start())
	defer d.Shutdown(ctx)

	if p, err := d.Paused("api"); err != nil || !p {
		t.Errorf("api paused = %v, %v; want true (carried over)", p, err)
	}
	if p, err := d.Paused("web"); err != nil || p {
		t.Errorf("web paused = %v, %v; want false (the new layout's state is newer)", p, err)
	}
	if got := rdb.HGet(ctx, quota.New, "123").Val(); got != "7" {
		t.Errorf("quota window 123 = %q in the new layout; want 7", got)
	}
	if ttl := rdb.PTTL(ctx, quota.New).Val(); ttl <= 59*time.Minute || ttl > time.Hour {
		t.Errorf("quota TTL %v in the new layout; want the old one's, about 1h", ttl)
	}
	if got := rdb.Get(ctx, sp.Bucket("api")).Val(); got != pushed {
		t.Errorf("api's bucket %q in the new layout; want the old one's pushback %s", got, pushed)
	}
	var warned string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "may be releasing them") {
			warned = l
		}
	}
	if !strings.Contains(warned, "api") || strings.Contains(warned, "web") {
		t.Errorf("warning %q; want one naming api (its old bucket exists) and not web", warned)
	}
}
