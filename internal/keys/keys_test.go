package keys_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/queue"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// slotClient is the Redis that answers CLUSTER KEYSLOT: the test cluster
// when REDIS_CLUSTER_ADDRS is set, otherwise a lone cluster-enabled
// redis-server started for this test (it owns no slots, but it answers
// KEYSLOT as any cluster node does).
func slotClient(t *testing.T) redis.UniversalClient {
	t.Helper()
	if redistest.Cluster() {
		return redistest.Client(t)
	}
	srv, err := redistest.Start("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	if err != nil {
		t.Fatalf("cluster-enabled redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() {
		c.Close()
		srv.Stop()
		srv.Cleanup()
	})
	return c
}

// keyslots returns CLUSTER KEYSLOT of each key, in one pipeline.
func keyslots(t *testing.T, rdb redis.UniversalClient, ks []string) []int64 {
	t.Helper()
	ctx := context.Background()
	pipe := rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(ks))
	for i, k := range ks {
		cmds[i] = pipe.ClusterKeySlot(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("CLUSTER KEYSLOT: %v", err)
	}
	out := make([]int64, len(ks))
	for i, c := range cmds {
		out[i] = c.Val()
		if int64(redistest.Slot(ks[i])) != out[i] {
			t.Fatalf("redistest.Slot(%.60q) = %d, CLUSTER KEYSLOT = %d", ks[i], redistest.Slot(ks[i]), out[i])
		}
	}
	return out
}

// Hostile admission keys: producers choose them, so they may hold braces,
// be empty, be any bytes, be long.
var hostileKeys = []string{
	"", "k", "}", "{", "}{", "{}", "{{}}", "}}{{", "a}b{c", "{user}", "{user}:1", "user:42",
	"ключ/用户/🔑", "\x00\xff\xfe", "\r\n", " ", "*", "shaper:lim:{tb:api:x}",
	strings.Repeat("k", 10<<10),
	strings.Repeat("}{", 5<<10),
	"{" + strings.Repeat("x", 10<<10) + "}",
}

// Prefixes: config allows only [A-Za-z0-9._-]+ (validPrefixes). The Go API
// takes any string, and shaper's limiter and cron keys stay on one slot
// per script even with braces in the prefix (bracedPrefixes); asynq's do
// not (see TestBracedPrefixSplitsAsynqQueue), nor do the downstream's keys
// that share asynq's tag, which is why the prefix is restricted.
var (
	validPrefixes  = []string{"", "shaper", "t_TestX_0a1b", "prod.eu-1"}
	bracedPrefixes = []string{"a{b", "a}b", "{p}", "}{", "}"}
)

// Window numbers a script appends: small, and the 15-16 digit numbers of
// µs-scale windows at today's clock.
func windowNumbers() []int64 {
	now := time.Now().UnixMicro()
	return []int64{0, 1, 9, now / 1_000_000, now / 1000, now / 10, now}
}

// scriptSet is the key set one script call touches.
type scriptSet struct {
	what string
	keys []string
}

func limiterSets(s keys.Space, name, key string) []scriptSet {
	var sets []scriptSet
	for _, alg := range []string{"fw", "swc"} {
		base := s.Limiter(alg, name, key)
		set := scriptSet{what: alg + " limiter (base and window counters)", keys: []string{base}}
		for _, n := range windowNumbers() {
			set.keys = append(set.keys, base+":"+fmt.Sprint(n), base+":"+fmt.Sprint(n-1))
		}
		sets = append(sets, set)
	}
	for _, alg := range []string{"swl", "tb", "lb"} {
		sets = append(sets, scriptSet{what: alg + " limiter", keys: []string{s.Limiter(alg, name, key)}})
	}
	return sets
}

func downstreamSets(s keys.Space, ds string) []scriptSet {
	q := s.Queue(ds)
	p := "asynq:{" + q + "}:"
	day := time.Now().UTC().Format("2006-01-02")
	sum := md5.Sum([]byte(`{"n":1}`))
	asynqKeys := []string{
		p + "pending", p + "active", p + "scheduled", p + "retry", p + "archived", p + "lease",
		p + "completed", p + "paused", p + "processed", p + "failed", p + "processed:" + day,
		p + "failed:" + day, p + "t:0f8f3b5e-1c55-4a8e-9d1b-2f9a4c6e7d01", p + "t:{unique}:}{",
		p + "unique:shaper:task:" + hex.EncodeToString(sum[:]), p + "g:grp", p + "g:grp:set1",
		p + "groups", p + "aggregation_sets", s.Quarantine(ds), s.TakeMaintained(ds),
	}
	// one set: the take (take.lua) reserves the slot on the downstream's
	// keys and moves the task in asynq's, in one script
	own := []string{s.Bucket(ds), s.DownstreamState(ds), s.Leases(ds), s.LeaseCounts(ds), s.Breaker(ds),
		s.Quota(ds, "s3600000000_60000000"), s.Quota(ds, "a86400000000_0"), s.Announced(ds), s.Issued(ds),
		s.PriorityClaims(ds), s.KeyCeiling(ds, "}{tenant")}
	return []scriptSet{{what: "downstream " + ds + " and asynq queue " + q, keys: append(own, asynqKeys...)}}
}

// Every key family, for every hostile input: all keys one script touches
// map to one slot, so CROSSSLOT cannot happen.
func TestScriptKeysShareASlot(t *testing.T) {
	t.Parallel()
	rdb := slotClient(t)
	var sets []scriptSet
	for _, p := range append(append([]string(nil), validPrefixes...), bracedPrefixes...) {
		s := keys.New(p)
		for _, name := range []string{"api", "a.b-c_D9"} {
			for _, k := range hostileKeys {
				sets = append(sets, limiterSets(s, name, k)...)
			}
		}
		for _, ds := range []string{"api", "billing-db", "x", "A.b_c-9", strings.Repeat("d", 64)} {
			if strings.ContainsAny(p, "{}") {
				continue // asynq's keys split (below), and the downstream's follow them
			}
			sets = append(sets, downstreamSets(s, ds)...)
		}
		for _, name := range []string{"nightly", "", "}{", "{cron}"} {
			set := scriptSet{what: "cron lock " + name}
			for _, tick := range []int64{0, time.Now().Unix(), 1 << 40} {
				set.keys = append(set.keys, s.CronLock(name, tick))
			}
			sets = append(sets, set)
		}
	}
	var all []string
	for _, set := range sets {
		all = append(all, set.keys...)
	}
	slots := keyslots(t, rdb, all)
	i := 0
	for _, set := range sets {
		got := slots[i : i+len(set.keys)]
		i += len(set.keys)
		for j, sl := range got {
			if sl != got[0] {
				t.Errorf("%s: %.80q in slot %d, %.80q in slot %d; want one slot", set.what, set.keys[0], got[0], set.keys[j], sl)
			}
		}
	}
	t.Logf("%d key sets, %d keys, each set on one slot", len(sets), len(all))
}

// asynq takes the queue name as its hash tag ("asynq:{<queue>}:…"), and the
// queue name starts with the prefix: a prefix starting with '}' leaves
// asynq an empty tag, so it hashes whole key names and one queue's keys
// scatter over slots (CROSSSLOT in asynq's scripts). This is why
// redis.prefix must match [A-Za-z0-9._-]+ (internal/config).
func TestBracedPrefixSplitsAsynqQueue(t *testing.T) {
	t.Parallel()
	rdb := slotClient(t)
	set := downstreamSets(keys.New("}{"), "api")[0]
	slots := keyslots(t, rdb, set.keys)
	split := false
	for _, sl := range slots {
		split = split || sl != slots[0]
	}
	if !split {
		t.Errorf("asynq keys of prefix \"}{\" all on slot %d; the reason for the prefix rule is gone", slots[0])
	}
}

// Keys of different (algorithm, name, key) never coincide, not even once a
// script appends a window number to a base key: a key holding '}' or ':'
// cannot reach into another key's state.
func TestKeysAreDistinct(t *testing.T) {
	t.Parallel()
	s := keys.New("")
	seen := map[string]string{}
	add := func(k, who string) {
		if prev, dup := seen[k]; dup && prev != who {
			t.Errorf("key %.80q is both %s and %s", k, prev, who)
		}
		seen[k] = who
	}
	extra := []string{"x", "x}", "x}:1", "x}:1}", "x:1", "1", "x}:", ":1"}
	for _, alg := range []string{"fw", "swl", "swc", "tb", "lb"} {
		for _, name := range []string{"api", "api.v2"} {
			for _, k := range append(extra, hostileKeys...) {
				who := fmt.Sprintf("%s/%s/%.40q", alg, name, k)
				base := s.Limiter(alg, name, k)
				add(base, who)
				if alg == "fw" || alg == "swc" {
					for _, n := range []int64{0, 1, 12, 1764460000} {
						add(base+":"+fmt.Sprint(n), who)
					}
				}
				if alg == "swc" {
					for _, n := range []int{2, 10, 60} { // the sub-window counters' HASHes
						add(s.SubWindows(n, name, k), fmt.Sprintf("%s/%d", who, n))
					}
				}
			}
		}
	}
	for _, ds := range []string{"api", "api.v2", "x"} {
		add(s.Bucket(ds), "bucket "+ds)
		add(s.DownstreamState(ds), "state "+ds)
		add(s.Leases(ds), "leases "+ds)
		add(s.LeaseCounts(ds), "lease counts "+ds)
		add(s.Breaker(ds), "breaker "+ds)
		add(s.Quota(ds, "s1000000_16667"), "quota "+ds)
		add(s.Announced(ds), "announced "+ds)
		add(s.Issued(ds), "issued "+ds)
	}
}

// Different downstreams and different tenants land on different slots,
// spread evenly over the masters of a 3-master cluster.
func TestKeysSpreadOverSlots(t *testing.T) {
	t.Parallel()
	rdb := slotClient(t)
	s := keys.New("")
	const masters = 3
	check := func(what string, ks []string, minDistinct int) {
		t.Helper()
		slots := keyslots(t, rdb, ks)
		distinct := map[int64]bool{}
		perMaster := make([]int, masters)
		for _, sl := range slots {
			distinct[sl] = true
			perMaster[redistest.SlotRange(uint16(sl), masters)]++
		}
		t.Logf("%s: %d keys on %d slots; per master of 3: %v", what, len(ks), len(distinct), perMaster)
		if len(distinct) < minDistinct {
			t.Errorf("%s: %d keys on %d distinct slots, want >= %d", what, len(ks), len(distinct), minDistinct)
		}
		for m, n := range perMaster {
			if share := float64(n) / float64(len(ks)); share < 0.28 || share > 0.39 {
				t.Errorf("%s: master %d holds %.1f%% of the keys, want about a third", what, m, 100*share)
			}
		}
	}
	var tenants, tenantsTB, dss, queues []string
	for i := 0; i < 6000; i++ {
		tenants = append(tenants, s.Limiter("fw", "api", fmt.Sprintf("tenant-%d", i)))
		tenantsTB = append(tenantsTB, s.Limiter("tb", "per-user", fmt.Sprintf("user:%d", i)))
	}
	for i := 0; i < 300; i++ {
		ds := fmt.Sprintf("ds-%d", i)
		dss = append(dss, s.Bucket(ds))
		queues = append(queues, "asynq:{"+s.Queue(ds)+"}:pending")
	}
	// 6000 keys into 16384 slots: about 5000 distinct by the birthday bound.
	check("fixed-window tenants", tenants, 4500)
	check("token-bucket users", tenantsTB, 4500)
	check("downstream buckets", dss, 290)
	check("downstream queues", queues, 290)

	// The same tenant under two algorithms or limiters is two independent
	// keys, on slots of their own.
	a, b := s.Limiter("fw", "api", "t1"), s.Limiter("tb", "api", "t1")
	if sl := keyslots(t, rdb, []string{a, b}); sl[0] == sl[1] {
		t.Logf("note: %s and %s share slot %d by chance", a, b, sl[0])
	}

	// On a real cluster, ask the cluster which master serves each bucket.
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return
	}
	ctx := context.Background()
	nodes := map[string]int{}
	for _, k := range dss {
		m, err := cc.MasterForKey(ctx, k)
		if err != nil {
			t.Fatalf("MasterForKey: %v", err)
		}
		nodes[m.Options().Addr]++
	}
	t.Logf("300 downstream buckets over the cluster's masters: %v", nodes)
	if len(nodes) < masters {
		t.Errorf("300 downstream buckets on %d masters, want every one of %d", len(nodes), masters)
	}
}

// asynq's real keys for our queue names, as it writes them: enqueue
// through queue.Producer and read back every key of the queue. The
// layout checked in TestScriptKeysShareASlot is asynq's internal detail;
// this catches it changing under us.
func TestAsynqQueueKeysShareASlot(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	slotRDB := slotClient(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix})
	defer p.Close()
	for _, ds := range []string{"api", "billing-db"} {
		for i, tk := range []queue.Task{
			{Downstream: ds, Payload: []byte("now")},
			{Downstream: ds, Payload: []byte("later"), ProcessAt: time.Now().Add(time.Hour)},
			{Downstream: ds, Payload: []byte("unique"), UniqueKey: "{u}}{" + ds},
		} {
			if _, err := p.Enqueue(ctx, tk); err != nil {
				t.Fatalf("enqueue %s #%d: %v", ds, i, err)
			}
		}
		q := p.Queue(ds)
		found, err := redistest.ScanKeys(ctx, rdb, "asynq:{"+q+"}*")
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		if len(found) < 4 { // pending, scheduled, and one hash per task
			t.Fatalf("queue %s: found keys %q, want pending, scheduled and the tasks", q, found)
		}
		slots := keyslots(t, slotRDB, found)
		for j := range found {
			if slots[j] != slots[0] {
				t.Errorf("queue %s: %q in slot %d, %q in slot %d", q, found[0], slots[0], found[j], slots[j])
			}
		}
		// A brace in the queue name would move asynq's hash tag.
		if strings.ContainsAny(q, "{}") {
			t.Errorf("queue name %q holds a brace", q)
		}
	}
}

// The asynq key builders name the keys asynq v0.26 writes
// (internal/base/base.go), and the quarantine shares their slot.
func TestAsynqKeys(t *testing.T) {
	t.Parallel()
	a := keys.New("shaper").Asynq("api")
	for _, c := range []struct{ got, want string }{
		{a.Name, "shaper:api"},
		{a.Task("x1"), "asynq:{shaper:api}:t:x1"},
		{a.TaskPrefix(), "asynq:{shaper:api}:t:"},
		{a.Pending(), "asynq:{shaper:api}:pending"},
		{a.Active(), "asynq:{shaper:api}:active"},
		{a.Scheduled(), "asynq:{shaper:api}:scheduled"},
		{a.Retry(), "asynq:{shaper:api}:retry"},
		{a.Archived(), "asynq:{shaper:api}:archived"},
		{a.Lease(), "asynq:{shaper:api}:lease"},
		{a.Completed(), "asynq:{shaper:api}:completed"},
		{keys.New("").Quarantine("api"), "shaper:quarantine:{shaper:api}"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestValidName(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		want bool
	}{
		{"billing-api", true}, {"a.b_c-9", true}, {strings.Repeat("x", 64), true},
		{"", false}, {strings.Repeat("x", 65), false}, {"a b", false}, {"a:b", false}, {"{a}", false}, {"é", false}, {".", false}, {"..", false}, {"...", true},
	} {
		if got := keys.ValidName(c.name); got != c.want {
			t.Errorf("ValidName(%q) = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestMemberProtocol(t *testing.T) {
	for m, want := range map[string]int{
		keys.ProcessMember("h:1:ab"): keys.Protocol,
		"h:1:ab":                     1, // a build before protocols were said
		"h:1:ab~p":                   1,
		"h~p:1:ab~p7":                7,
	} {
		if got := keys.MemberProtocol(m); got != want {
			t.Errorf("MemberProtocol(%q) = %d, want %d", m, got, want)
		}
	}
}
