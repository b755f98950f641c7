package main_test

// Cluster tests: shaper on a real Redis Cluster. They run when
// REDIS_CLUSTER_ADDRS names one (scripts/test.sh starts a 3-master cluster
// with scripts/cluster.sh and runs `go test -run Cluster` here); the
// failover test starts a private cluster with replicas, since it kills a
// master.

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/clocktest"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/testsink"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// needCluster skips the test unless the run has a test cluster.
func needCluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	if !redistest.Cluster() {
		t.Skip("set REDIS_CLUSTER_ADDRS to run the cluster tests (eval \"$(scripts/cluster.sh start)\")")
	}
	return redistest.Client(t).(*redis.ClusterClient)
}

// dsSpec is one downstream of a cluster config, with its sink.
type dsSpec struct {
	name  string
	rate  int // per second
	tasks int
	sink  *testsink.Sink
}

func clusterConfig(addrs []string, prefix string, dss []dsSpec) string {
	var b strings.Builder
	fmt.Fprintf(&b, "redis: {cluster: [%s], prefix: %q}\nhttp: {listen: off}\nshutdown_timeout: 5s\ndownstreams:\n",
		strings.Join(addrs, ", "), prefix)
	for _, d := range dss {
		fmt.Fprintf(&b, "  - {name: %s, rate: %d/s, workers: 20, max_wait: 1s, handler: {type: http, url: %q, timeout: 5s}}\n",
			d.name, d.rate, d.sink.URL())
	}
	return b.String()
}

func enqueueAll(t *testing.T, rdb redis.UniversalClient, prefix string, dss []dsSpec) {
	t.Helper()
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix})
	defer p.Close()
	for _, d := range dss {
		for i := 0; i < d.tasks; i++ {
			if _, err := p.Enqueue(context.Background(), queue.Task{Downstream: d.name, Payload: []byte(fmt.Sprintf(`{"ds":%q,"n":%d}`, d.name, i))}); err != nil {
				t.Fatalf("enqueue %s #%d: %v", d.name, i, err)
			}
		}
	}
}

// warmUp runs a few tasks through every downstream of processes just
// started, and waits for them: connections to every master and to the
// sinks are open, scripts cached, clock offsets estimated. The cluster
// tests measure steady state on a cluster; a cold start is
// TestFidelityThreeProcesses' business.
func warmUp(t *testing.T, rdb redis.UniversalClient, prefix string, dss []dsSpec) {
	t.Helper()
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix})
	defer p.Close()
	const n = 10
	for _, d := range dss {
		for i := 0; i < n; i++ {
			if _, err := p.Enqueue(context.Background(), queue.Task{Downstream: d.name, Payload: []byte(warmPayload)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, 30*time.Second, "warm-up deliveries", func() bool {
		for _, d := range dss {
			if d.sink.Count() < n {
				return false
			}
		}
		return true
	})
}

const warmPayload = "warm-up"

// work is a sink's successful deliveries without the warm-up's.
func work(s *testsink.Sink) []testsink.Hit {
	var out []testsink.Hit
	for _, h := range s.OK() {
		if h.Payload != warmPayload {
			out = append(out, h)
		}
	}
	return out
}

// wakeTimes are the release times shaper stamped on hits (X-Shaper-Released).
func wakeTimes(hs []testsink.Hit) []time.Time {
	out := make([]time.Time, len(hs))
	for i, h := range hs {
		out[i] = h.Wake
	}
	return out
}

// masterAddr is the address of the master serving key now.
func masterAddr(t testing.TB, cc *redis.ClusterClient, key string) string {
	t.Helper()
	m, err := cc.MasterForKey(context.Background(), key)
	if err != nil {
		t.Fatalf("MasterForKey(%s): %v", key, err)
	}
	return m.Options().Addr
}

// pickDownstreams names n downstreams whose buckets sit on distinct slots
// and, between them, on every master.
func pickDownstreams(t *testing.T, cc *redis.ClusterClient, prefix string, n int) []string {
	t.Helper()
	space := keys.New(prefix)
	masters := map[string]bool{}
	var mu sync.Mutex // ForEachMaster calls the func from a goroutine per master
	cc.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		masters[c.Options().Addr] = true
		mu.Unlock()
		return nil
	})
	covered, slots := map[string]bool{}, map[uint16]bool{}
	var names, spare []string
	for i := 0; len(names) < n && i < 10000; i++ {
		name := fmt.Sprintf("ds%d", i)
		k := space.Bucket(name)
		sl := redistest.Slot(k)
		if slots[sl] {
			continue
		}
		m := masterAddr(t, cc, k)
		if covered[m] && len(covered) < len(masters) {
			spare = append(spare, name)
			continue
		}
		covered[m], slots[sl] = true, true
		names = append(names, name)
		if len(covered) == len(masters) {
			for _, s := range spare {
				if len(names) < n && !slots[redistest.Slot(space.Bucket(s))] {
					names = append(names, s)
					slots[redistest.Slot(space.Bucket(s))] = true
				}
			}
			spare = nil
		}
	}
	if len(names) < n || len(covered) < len(masters) {
		t.Fatalf("found downstreams %v covering %d of %d masters", names, len(covered), len(masters))
	}
	return names
}

func flushScripts(t *testing.T, cc *redis.ClusterClient) {
	t.Helper()
	err := cc.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
		return c.ScriptFlush(ctx).Err()
	})
	if err != nil {
		t.Fatalf("SCRIPT FLUSH: %v", err)
	}
}

// Three shaper processes on a 3-master cluster release four downstreams,
// whose buckets sit on different slots and between them on every master,
// each at its own rate. Halfway through, every master's script cache is
// flushed: EVALSHA answers NOSCRIPT and the calls fall back to EVAL.
func TestClusterFidelity(t *testing.T) {
	// Not parallel: the timing claim needs the CPU to itself.
	cc := needCluster(t)
	prefix := redistest.Prefix(t)
	names := pickDownstreams(t, cc, prefix, 4)
	space := keys.New(prefix)
	var dss []dsSpec
	for i, name := range names {
		rate := 20 + 10*i // 20, 30, 40, 50/s
		d := dsSpec{name: name, rate: rate, tasks: rate * 6, sink: testsink.New()}
		defer d.sink.Close()
		dss = append(dss, d)
		t.Logf("downstream %s at %d/s: bucket %s on slot %d of master %s; queue on slot %d", name, rate,
			space.Bucket(name), redistest.Slot(space.Bucket(name)), masterAddr(t, cc, space.Bucket(name)),
			redistest.Slot("asynq:{"+space.Queue(name)+"}:pending"))
	}
	cfg := clusterConfig(redistest.Addrs(), prefix, dss)
	procs := []*proc{startShaper(t, cfg), startShaper(t, cfg), startShaper(t, cfg)}
	warmUp(t, cc, prefix, dss)
	enqueueAll(t, cc, prefix, dss)
	total := 0
	for _, d := range dss {
		total += d.tasks
	}
	count := func() int {
		n := 0
		for _, d := range dss {
			n += len(work(d.sink))
		}
		return n
	}
	waitFor(t, 60*time.Second, "half the deliveries", func() bool { return count() >= total/2 })
	flushScripts(t, cc)
	t.Logf("SCRIPT FLUSH on every master after %d of %d deliveries", count(), total)
	waitFor(t, 60*time.Second, fmt.Sprint(total, " deliveries"), func() bool { return count() >= total })
	for _, p := range procs {
		p.stop(t)
	}
	for _, d := range dss {
		ok := work(d.sink)
		ts := testsink.Times(ok)
		maxWin := testsink.MaxInWindow(ts, time.Second)
		maxWake := testsink.MaxInWindow(wakeTimes(ok), time.Second)
		span := testsink.Span(ts)
		want := time.Duration(float64(d.tasks-1) / float64(d.rate) * float64(time.Second))
		t.Logf("%s at %d/s: %d releases, max in any 1s window %d (by release time %d), span %v (ideal %v), achieved %.3f/s",
			d.name, d.rate, len(ok), maxWin, maxWake, span.Round(time.Millisecond), want, testsink.Rate(ts))
		// The invariant holds on release instants (when shaper sends,
		// which it controls): at most rate+1 in any second. Arrivals at the
		// sink, which shares two cores with 3 shapers, 3 Redis masters and
		// this test, also carry the transport's jitter: 10% of slack, far
		// below any real burst (a backlog's worth).
		if maxWake > d.rate+1 || maxWin > d.rate+1+d.rate/10 {
			worstWindow(t, d.name, ok, ts[0])
			t.Errorf("%s: max in a sliding 1s window %d by release time (want <= %d), %d by arrival (want <= %d)",
				d.name, maxWake, d.rate+1, maxWin, d.rate+1+d.rate/10)
		}
		if span < want*97/100 || span > want*103/100 {
			t.Errorf("%s: %d releases took %v, want %v ± 3%%", d.name, d.tasks, span, want)
		}
		seen := map[string]int{}
		for _, h := range ok {
			seen[h.Payload]++
		}
		for i := 0; i < d.tasks; i++ {
			if n := seen[fmt.Sprintf(`{"ds":%q,"n":%d}`, d.name, i)]; n != 1 {
				t.Errorf("%s: task %d delivered %d times, want exactly 1", d.name, i, n)
			}
		}
		if bad := len(d.sink.Hits()) - len(d.sink.OK()); bad != 0 {
			t.Errorf("%s: %d failed requests, want 0", d.name, bad)
		}
	}
	// The backlog (asynq's multi-key stats script on each queue's slot)
	// reads back empty.
	in := queue.NewInspector(cc, prefix)
	for _, d := range dss {
		b, err := in.Backlog(d.name)
		if err != nil {
			t.Errorf("backlog %s: %v", d.name, err)
			continue
		}
		if b.Total() != 0 || b.Processed != d.tasks+10 {
			t.Errorf("backlog %s: %+v, want nothing left and %d processed (with the warm-up)", d.name, b, d.tasks+10)
		}
	}
}

// SCRIPT FLUSH on the masters (as after a failover or a restart, when a
// node's script cache is empty) costs nothing but a round trip: Script.Run
// gets NOSCRIPT from EVALSHA and falls back to EVAL, which caches the
// script again. State survives; decisions carry on where they were.
func TestClusterScriptFlushFallsBackToEval(t *testing.T) {
	t.Parallel()
	cc := needCluster(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	// admission keys spread over every master
	var users []string
	masters := map[string]bool{}
	for i := 0; len(masters) < 3 || len(users) < 6; i++ {
		u := fmt.Sprintf("user-%d", i)
		users = append(users, u)
		masters[masterAddr(t, cc, keys.New(prefix).Limiter("tb", "x", u))] = true
	}
	type lim struct{ l *limiters.Redis }
	var lims []lim
	for _, alg := range limiters.Algorithms() {
		l, err := limiters.New(cc, limiters.Config{Name: "x", Algorithm: alg, Limit: limiters.PerHour(2), Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		lims = append(lims, lim{l: l})
	}
	buckets := shaping.NewBuckets(cc, prefix)
	b := shaping.Bucket{Name: "flush", Rate: limiters.PerSecond(1)}

	exists := func(sha string) (on, off int) {
		var mu sync.Mutex // a goroutine per master
		cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			v, err := c.ScriptExists(ctx, sha).Result()
			mu.Lock()
			defer mu.Unlock()
			if err == nil && len(v) == 1 && v[0] {
				on++
			} else {
				off++
			}
			return nil
		})
		return
	}
	round := func(round int) {
		t.Helper()
		for _, l := range lims {
			for _, u := range users {
				res, err := l.l.Allow(ctx, u, 1)
				if err != nil {
					t.Fatalf("round %d: %s Allow(%s): %v", round, l.l.Config().Algorithm, u, err)
				}
				if res.Allowed != (round < 2) {
					t.Errorf("round %d: %s Allow(%s) allowed = %v, want %v (limit 2 per hour)", round, l.l.Config().Algorithm, u, res.Allowed, round < 2)
				}
			}
		}
		r, err := buckets.Reserve(ctx, b, 1, -1)
		if err != nil {
			t.Fatalf("round %d: Reserve: %v", round, err)
		}
		if want := time.Duration(round) * time.Second; r.Wait < want-300*time.Millisecond || r.Wait > want {
			t.Errorf("round %d: bucket wait %v, want about %v (next_free survived the flush)", round, r.Wait, want)
		}
	}
	round(0)
	if on, _ := exists(lua.TokenBucket.Hash()); on < 3 {
		t.Errorf("token bucket script cached on %d masters after use, want 3", on)
	}
	flushScripts(t, cc)
	if on, _ := exists(lua.TokenBucket.Hash()); on != 0 {
		t.Fatalf("token bucket script still cached on %d masters after SCRIPT FLUSH", on)
	}
	round(1) // EVALSHA -> NOSCRIPT -> EVAL on every master
	if on, _ := exists(lua.TokenBucket.Hash()); on < 3 {
		t.Errorf("token bucket script cached on %d masters after the fallback, want 3 (EVAL caches it)", on)
	}
	flushScripts(t, cc)
	round(2)
}

// A master stops; the cluster promotes its replica; shaper carries on. The
// downstream whose bucket and queue lived on the stopped master stalls for
// the failover and then drains its backlog; the other downstream does not
// notice. Nothing is lost. (Redis replication is asynchronous: writes the
// master acknowledged in its last instant may be lost, so a task may be
// delivered twice and a slot granted twice; the test reports both.)
func TestClusterFailover(t *testing.T) {
	needCluster(t)
	lc, err := redistest.StartCluster(3, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Stop()
	cc := lc.Client()
	defer cc.Close()
	prefix := redistest.Prefix(t)
	space := keys.New(prefix)
	// victim: bucket and queue on master 0; bystander: both on master 1
	pick := func(m int) string {
		for i := 0; ; i++ {
			n := fmt.Sprintf("ds%d", i)
			if lc.MasterFor(space.Bucket(n)) == m && lc.MasterFor("asynq:{"+space.Queue(n)+"}:pending") == m {
				return n
			}
		}
	}
	victim := dsSpec{name: pick(0), rate: 20, tasks: 200, sink: testsink.New()}
	bystander := dsSpec{name: pick(1), rate: 20, tasks: 200, sink: testsink.New()}
	defer victim.sink.Close()
	defer bystander.sink.Close()
	dss := []dsSpec{victim, bystander}
	cfg := clusterConfig(lc.Addrs(), prefix, dss)
	procs := []*proc{startShaper(t, cfg), startShaper(t, cfg)}
	// Warm up first: this test is about the failover, not a cold start.
	warmUp(t, cc, prefix, dss)
	enqueueAll(t, cc, prefix, dss)
	waitFor(t, 30*time.Second, "60 victim deliveries", func() bool { return len(work(victim.sink)) >= 60 })

	killed := time.Now()
	lc.Masters[0].Stop() // SIGKILL: no goodbye to the cluster
	replica := lc.Replicas[0][0]
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr})
	defer rc.Close()
	waitFor(t, 30*time.Second, "the replica's promotion", func() bool {
		s, err := rc.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(s, "role:master")
	})
	promoted := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := lc.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	healthy := time.Now()
	t.Logf("master %s killed; replica %s promoted after %v, cluster_state:ok after %v",
		lc.Masters[0].Addr, replica.Addr, promoted.Sub(killed).Round(time.Millisecond), healthy.Sub(killed).Round(time.Millisecond))

	done := func(d dsSpec) bool {
		seen := map[string]bool{}
		for _, h := range work(d.sink) {
			seen[h.Payload] = true
		}
		return len(seen) >= d.tasks
	}
	waitFor(t, 90*time.Second, "every task delivered", func() bool { return done(victim) && done(bystander) })
	for _, p := range procs {
		p.stop(t)
	}
	for _, d := range dss {
		ok := work(d.sink)
		ts := testsink.Times(ok)
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
		var gap time.Duration
		var gapAt time.Time
		for i := 1; i < len(ts); i++ {
			if g := ts[i].Sub(ts[i-1]); g > gap {
				gap, gapAt = g, ts[i-1]
			}
		}
		seen := map[string]int{}
		for _, h := range ok {
			seen[h.Payload]++
		}
		dups := len(ok) - len(seen)
		// Release instants (see TestClusterFidelity), outside the failover
		// (kill .. healthy+1s) and across it.
		rel := wakeTimes(ok)
		var before, after []time.Time
		for _, x := range rel {
			if x.Before(killed) {
				before = append(before, x)
			} else if x.After(healthy.Add(time.Second)) {
				after = append(after, x)
			}
		}
		maxAll := testsink.MaxInWindow(rel, time.Second)
		maxOut := max(testsink.MaxInWindow(before, time.Second), testsink.MaxInWindow(after, time.Second))
		maxArr := testsink.MaxInWindow(ts, time.Second)
		t.Logf("%s: %d deliveries of %d tasks (%d duplicates); longest gap %v starting %v after the kill; max releases in 1s: %d outside the failover, %d across it (%d arrivals)",
			d.name, len(ok), d.tasks, dups, gap.Round(time.Millisecond), gapAt.Sub(killed).Round(time.Millisecond), maxOut, maxAll, maxArr)
		if maxOut > d.rate+1 || maxAll > d.rate+1 {
			worstWindow(t, d.name, ok, killed)
		}
		if maxOut > d.rate+1 {
			t.Errorf("%s: max releases in a sliding 1s window outside the failover = %d, want <= %d", d.name, maxOut, d.rate+1)
		}
		// Replication is asynchronous: the promoted replica may lack the
		// last next_free writes, so slots of the last instant may be
		// granted again. Bounded, never a backlog's worth.
		if maxAll > 2*d.rate {
			t.Errorf("%s: max releases in a sliding 1s window across the failover = %d, want <= %d", d.name, maxAll, 2*d.rate)
		}
		if maxArr > 2*d.rate+d.rate/10 {
			t.Errorf("%s: max arrivals in a sliding 1s window = %d, want <= %d", d.name, maxArr, 2*d.rate+d.rate/10)
		}
		if d.name == bystander.name && gap > 2*time.Second {
			t.Errorf("bystander %s stalled %v: a failover elsewhere must not stop it", d.name, gap)
		}
		if gap > 15*time.Second {
			t.Errorf("%s: stalled %v, want shaper to resume within 15s of the kill", d.name, gap)
		}
	}
}

// Memory per key of each algorithm, by MEMORY USAGE, with realistic key
// names: the numbers behind docs/scaling.md's keys-per-GB table.
func TestClusterKeyMemory(t *testing.T) {
	t.Parallel()
	cc := needCluster(t)
	ctx := context.Background()
	prefix := "shaper" // the default prefix: key lengths as in production
	run := redistest.Prefix(t)[len(redistest.Prefix(t))-8:]
	const n = 300
	type row struct {
		what  string
		bytes float64
		max   float64
	}
	var rows []row
	measure := func(what string, keysOf func(i int) []string, bound float64) {
		t.Helper()
		var total int64
		for i := 0; i < n; i++ {
			for _, k := range keysOf(i) {
				b, err := cc.MemoryUsage(ctx, k).Result()
				if err != nil {
					t.Fatalf("MEMORY USAGE %s: %v", k, err)
				}
				total += b
			}
		}
		per := float64(total) / n
		rows = append(rows, row{what, per, bound})
		if per > bound {
			t.Errorf("%s: %.0f bytes per key, want <= %.0f", what, per, bound)
		}
	}
	user := func(i int) string { return fmt.Sprintf("tenant-%s-%06d", run, i) }
	for _, c := range []struct {
		alg   limiters.Algorithm
		limit limiters.Limit
		cost  int64
		bound float64
	}{
		{limiters.FixedWindow, limiters.PerMinute(100), 1, 150},
		{limiters.SlidingCounter, limiters.PerMinute(100), 1, 300},
		{limiters.TokenBucket, limiters.PerSecond(10), 1, 200},
		{limiters.LeakyBucket, limiters.PerSecond(10), 1, 200},
		{limiters.SlidingLog, limiters.PerMinute(10), 10, 1000},
		{limiters.SlidingLog, limiters.PerMinute(100), 100, 6000},
		// past zset-max-listpack-entries (128) the ZSET is a skiplist
		{limiters.SlidingLog, limiters.PerMinute(1000), 1000, 150000},
	} {
		name := fmt.Sprintf("api%d", len(rows))
		now := time.Now()
		cfg := limiters.Config{Name: name, Algorithm: c.alg, Limit: c.limit, Prefix: prefix, Clock: clocktest.New(now)}
		l, err := limiters.New(cc, cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Clock = clocktest.New(now.Add(-c.limit.Period))
		prev, err := limiters.New(cc, cfg) // the same keys, a window earlier
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			if res, err := l.Allow(ctx, user(i), c.cost); err != nil || !res.Allowed {
				t.Fatalf("%s: %v %v", c.alg, res, err)
			}
			if c.alg == limiters.SlidingCounter { // the previous window too
				if _, err := prev.Allow(ctx, user(i), c.cost); err != nil {
					t.Fatal(err)
				}
			}
		}
		win := now.UnixMicro() / int64(c.limit.Period/time.Microsecond)
		keysOf := func(i int) []string { return []string{l.Key(user(i))} }
		switch c.alg {
		case limiters.FixedWindow:
			keysOf = func(i int) []string { return []string{fmt.Sprintf("%s:%d", l.Key(user(i)), win)} }
		case limiters.SlidingCounter:
			keysOf = func(i int) []string {
				return []string{fmt.Sprintf("%s:%d", l.Key(user(i)), win), fmt.Sprintf("%s:%d", l.Key(user(i)), win-1)}
			}
		}
		what := string(c.alg)
		if c.alg == limiters.SlidingLog {
			what = fmt.Sprintf("%s, %d entries", c.alg, c.cost)
		}
		measure(what, keysOf, c.bound)
	}
	b := shaping.NewBuckets(cc, prefix)
	for i := 0; i < n; i++ {
		if _, err := b.Reserve(ctx, shaping.Bucket{Name: "mem" + user(i), Rate: limiters.PerSecond(1)}, 1, -1); err != nil {
			t.Fatal(err)
		}
	}
	measure("shaping bucket", func(i int) []string { return []string{b.Key("mem" + user(i))} }, 150)
	for _, r := range rows {
		t.Logf("%-28s %6.0f bytes/key  %9.2fM keys/GB", r.what, r.bytes, 1e9/r.bytes/1e6)
	}
}

// scriptMicros is the Redis CPU time per script call, summed over the
// masters: INFO commandstats usec/calls of EVALSHA and EVAL.
func scriptMicros(b *testing.B, rdb redis.UniversalClient) float64 {
	var mu sync.Mutex
	var usec, calls float64
	read := func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(info, "\n") {
			if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
				continue
			}
			var c, u float64
			for _, f := range strings.Split(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), ",") {
				k, v, _ := strings.Cut(f, "=")
				switch k {
				case "calls":
					fmt.Sscan(v, &c)
				case "usec":
					fmt.Sscan(v, &u)
				}
			}
			mu.Lock()
			usec, calls = usec+u, calls+c
			mu.Unlock()
		}
		return nil
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(context.Background(), read)
	} else {
		err = read(context.Background(), rdb.(*redis.Client))
	}
	if err != nil || calls == 0 {
		b.Errorf("commandstats: %v (calls %v)", err, calls)
		return 0
	}
	return usec / calls
}

// BenchmarkClusterDecisions measures token-bucket decisions per second
// over many keys on one redis-server and on a 3-master cluster, both
// started here. Run by hand (numbers in docs/benchmarks.md):
//
//	go test -run '^$' -bench ClusterDecisions -benchtime 5s ./cmd/shaper/
func BenchmarkClusterDecisions(b *testing.B) {
	for _, c := range []struct {
		name string
		open func(b *testing.B) (redis.UniversalClient, func())
	}{
		{"1-server", func(b *testing.B) (redis.UniversalClient, func()) {
			s, err := redistest.Start()
			if err != nil {
				b.Fatal(err)
			}
			c := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 256})
			return c, func() { c.Close(); s.Stop(); s.Cleanup() }
		}},
		{"3-masters", func(b *testing.B) (redis.UniversalClient, func()) {
			lc, err := redistest.StartCluster(3, 0)
			if err != nil {
				b.Fatal(err)
			}
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: lc.Addrs(), PoolSize: 256})
			return c, func() { c.Close(); lc.Stop() }
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			rdb, stop := c.open(b)
			defer stop()
			l, err := limiters.New(rdb, limiters.Config{Name: "bench", Algorithm: limiters.TokenBucket, Limit: limiters.PerSecond(1000)})
			if err != nil {
				b.Fatal(err)
			}
			const nkeys = 100000
			var mu sync.Mutex
			seed := 0
			b.SetParallelism(64)
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				mu.Lock()
				i := seed * 7919
				seed++
				mu.Unlock()
				for pb.Next() {
					i++
					if _, err := l.Allow(context.Background(), fmt.Sprintf("user-%d", i%nkeys), 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
			b.ReportMetric(scriptMicros(b, rdb), "server-µs/decision")
		})
	}
}

// worstWindow logs the busiest 1s window of hits: arrival, wake and slot
// of each, relative to ref.
func worstWindow(t *testing.T, name string, hs []testsink.Hit, ref time.Time) {
	sort.Slice(hs, func(i, j int) bool { return hs[i].At.Before(hs[j].At) })
	best, bi, j := 0, 0, 0
	for i := range hs {
		for hs[i].At.Sub(hs[j].At) >= time.Second {
			j++
		}
		if i-j+1 > best {
			best, bi = i-j+1, j
		}
	}
	var b strings.Builder
	for _, h := range hs[bi : bi+best] {
		fmt.Fprintf(&b, " [at %v wake %v slot %v]", h.At.Sub(ref).Round(time.Millisecond), h.Wake.Sub(ref).Round(time.Millisecond), h.Slot.Sub(ref).Round(time.Millisecond))
	}
	t.Logf("%s busiest 1s (%d):%s", name, best, b.String())
}
