package shaping_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/shaping"
)

// A process says its protocol in the live processes' ZSET and counts the
// others': a process of an earlier build (a member that says none) makes
// shaper_fleet_protocols 2, and it is 1 again once that process has left.
func TestFleetProtocolsCountsAnEarlierBuild(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	sp := keys.New(prefix)
	ctx := context.Background()
	const old = "old-host:42:cafe"
	rdb.ZAdd(ctx, sp.Processes(), redis.Z{Score: float64(time.Now().Unix()), Member: old})
	reg := prometheus.NewRegistry()
	d := shaping.New(rdb, shaping.Config{Prefix: prefix, Registerer: reg})
	must(t, d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(10),
		Handler: func(context.Context, *shaping.Task) error { return nil }}))
	must(t, d.Start())
	t.Cleanup(func() { d.Shutdown(context.Background()) })
	protocols := func() float64 { v, _ := gauge(reg, "shaper_fleet_protocols"); return v }
	waitFor(t, 5*time.Second, "two protocols counted", func() bool { return protocols() == 2 })
	var mine []string
	for _, m := range rdb.ZRange(ctx, sp.Processes(), 0, -1).Val() {
		if m != old {
			mine = append(mine, m)
		}
	}
	if len(mine) != 1 || keys.MemberProtocol(mine[0]) != keys.Protocol || !strings.HasSuffix(mine[0], "~p2") {
		t.Fatalf("this process's members %q, want one that says protocol %d", mine, keys.Protocol)
	}
	rdb.ZRem(ctx, sp.Processes(), old)
	rdb.Publish(ctx, sp.ProcessesChannel(), "leave")
	waitFor(t, 5*time.Second, "one protocol once the earlier build left", func() bool { return protocols() == 1 })
}
