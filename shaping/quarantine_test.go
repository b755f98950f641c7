package shaping_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/metrics"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// qEnv is a dispatcher with metrics over one downstream "api" whose
// handler records what it receives.
type qEnv struct {
	rdb    redis.UniversalClient
	prefix string
	a      keys.AsynqQueue
	m      *metrics.Metrics
	d      *shaping.Dispatcher

	mu   sync.Mutex
	got  []*shaping.Task
	seen map[string]bool // payloads
}

func newQEnv(t *testing.T, qc shaping.QuarantineConfig) *qEnv {
	t.Helper()
	e := &qEnv{rdb: redistest.Client(t), prefix: redistest.Prefix(t), seen: map[string]bool{}}
	e.a = keys.New(e.prefix).Asynq("api")
	reg := prometheus.NewRegistry()
	e.m = metrics.New(reg) // the dispatcher's own collectors, shared through reg
	e.d = shaping.New(e.rdb, shaping.Config{Prefix: e.prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Registerer: reg, ShutdownTimeout: 5 * time.Second, Quarantine: qc})
	err := e.d.Add(shaping.Downstream{Name: "api", Rate: limiters.PerSecond(50), Workers: 5,
		Handler: func(ctx context.Context, tk *shaping.Task) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.got = append(e.got, tk)
			e.seen[string(tk.Payload)] = true
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.d.Shutdown(context.Background()) })
	return e
}

func (e *qEnv) delivered() (n int, bad int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, tk := range e.got {
		if tk.ID == "" || tk.Type == "" {
			bad++
		}
	}
	return len(e.seen), bad
}

// quarantined reads the quarantine list: reason by id.
func (e *qEnv) quarantined(t *testing.T) map[string]string {
	t.Helper()
	raw, err := e.rdb.LRange(context.Background(), keys.New(e.prefix).Quarantine("api"), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range raw {
		var ent struct {
			ID, Reason string
			In         []string
			MsgHex     string `json:"msg_hex"`
		}
		if err := json.Unmarshal([]byte(r), &ent); err != nil {
			t.Fatalf("quarantine entry %q: %v", r, err)
		}
		out[ent.ID] = ent.Reason
	}
	return out
}

// plantCorrupt writes a corrupt entry of every kind into the queue (the
// undecodable one among the expired leases, where it stops asynq's
// recoverer); good is a valid msg of another task.
func (e *qEnv) plantCorrupt(t *testing.T, expired float64, good string) {
	t.Helper()
	ctx := context.Background()
	plant := func(id, list, zset string, fields ...string) {
		t.Helper()
		if len(fields) > 0 {
			must(t, e.rdb.HSet(ctx, e.a.Task(id), fields).Err())
		}
		if list != "" {
			must(t, e.rdb.LPush(ctx, list, id).Err())
		}
		if zset != "" {
			must(t, e.rdb.ZAdd(ctx, zset, redis.Z{Score: expired, Member: id}).Err())
		}
	}
	plant("bad-msg", e.a.Active(), e.a.Lease(), "msg", "\xff\xfe not a protobuf", "state", "active")
	plant("no-hash", "", e.a.Archived())
	// asynq may dequeue this one before the full scan sees it; its dequeue
	// script then creates a hash with a state and no msg.
	plant("no-hash-pending", e.a.Pending(), "")
	plant("empty-msg", e.a.Pending(), "", "msg", "", "state", "pending")
	plant("no-msg", "", e.a.Retry(), "state", "retry")
	plant("wrong-id", "", e.a.Scheduled(), "msg", good, "state", "scheduled")

}

// A crashed process left 10 tasks active with an expired lease, and the
// queue holds corrupt entries of every kind, one of them (an undecodable
// msg) among the expired leases, which makes asynq's recoverer fail on the
// whole queue ("cannot decode message") for as long as it is there. With
// the dispatcher running, the corrupt entries go to the quarantine,
// counted by reason, and the crashed tasks are recovered and delivered.
func TestQuarantineUnsticksCrashRecovery(t *testing.T) {
	t.Parallel()
	// Full scans on (they are off by default); the short scan often, for
	// the entry asynq dequeues while the full scan runs (no-hash-pending).
	e := newQEnv(t, shaping.QuarantineConfig{Interval: 200 * time.Millisecond, FullInterval: time.Hour})
	ctx := context.Background()
	p := queue.NewProducer(e.rdb, queue.ProducerConfig{Prefix: e.prefix})
	defer p.Close()
	var ids []string
	for i := 0; i < 10; i++ {
		rc, err := p.Enqueue(ctx, queue.Task{Downstream: "api", Payload: []byte{byte('0' + i)}})
		must(t, err)
		ids = append(ids, rc.ID)
	}
	// The crashed process: each task dequeued (active, leased) and its lease
	// expired a minute ago, as asynq's dequeue script leaves them.
	expired := float64(time.Now().Add(-time.Minute).Unix())
	for _, id := range ids {
		must(t, e.rdb.LRem(ctx, e.a.Pending(), 0, id).Err())
		must(t, e.rdb.LPush(ctx, e.a.Active(), id).Err())
		must(t, e.rdb.ZAdd(ctx, e.a.Lease(), redis.Z{Score: expired, Member: id}).Err())
		must(t, e.rdb.HSet(ctx, e.a.Task(id), "state", "active").Err())
	}
	good, err := e.rdb.HGet(ctx, e.a.Task(ids[0]), "msg").Result()
	must(t, err)
	e.plantCorrupt(t, expired, good)
	must(t, e.d.Start())
	waitFor(t, 30*time.Second, "the 10 crashed tasks delivered", func() bool { n, _ := e.delivered(); return n == 10 })
	if _, bad := e.delivered(); bad > 0 {
		t.Errorf("%d tasks without id or type reached the handler, want 0", bad)
	}

	want := map[string]string{"bad-msg": shaping.ReasonUndecodableMsg, "no-hash": shaping.ReasonNoTaskHash,
		"empty-msg": shaping.ReasonEmptyMsg, "no-msg": shaping.ReasonNoMsg, "wrong-id": shaping.ReasonIDMismatch}
	// The full scan runs in the background after Start.
	waitFor(t, 10*time.Second, "6 entries in the quarantine", func() bool { return len(e.quarantined(t)) >= 6 })
	total := func() float64 {
		n := 0.0
		for _, r := range []string{shaping.ReasonNoTaskHash, shaping.ReasonNoMsg, shaping.ReasonEmptyMsg,
			shaping.ReasonUndecodableMsg, shaping.ReasonIDMismatch} {
			n += testutil.ToFloat64(e.m.Quarantined.WithLabelValues("api", r))
		}
		return n
	}
	// the counters follow the script's reply: the list can show a task
	// before its count
	waitFor(t, 5*time.Second, "6 quarantines counted", func() bool { return total() >= 6 })
	got := e.quarantined(t)
	if r := got["no-hash-pending"]; r != shaping.ReasonNoTaskHash && r != shaping.ReasonNoMsg {
		t.Errorf("quarantine[no-hash-pending] = %q, want %s or %s", r, shaping.ReasonNoTaskHash, shaping.ReasonNoMsg)
	}
	delete(got, "no-hash-pending")
	if n := e.rdb.Exists(ctx, e.a.Task("no-hash-pending")).Val(); n != 0 {
		t.Errorf("a task hash of no-hash-pending exists")
	}
	for id, reason := range want {
		if got[id] != reason {
			t.Errorf("quarantine[%s] = %q, want %q", id, got[id], reason)
		}
		if n := testutil.ToFloat64(e.m.Quarantined.WithLabelValues("api", reason)); n < 1 {
			t.Errorf("shaper_queue_quarantined_total{reason=%q} = %v, want >= 1", reason, n)
		}
		if n, _ := e.rdb.Exists(ctx, e.a.Task(id)).Result(); n != 0 {
			t.Errorf("task hash of %s still exists", id)
		}
	}
	if len(got) != len(want) {
		t.Errorf("quarantine holds %v, want exactly %v", got, want)
	}
	if v := total(); v != 6 {
		t.Errorf("shaper_queue_quarantined_total = %v in all, want 6", v)
	}
	waitFor(t, 10*time.Second, "shaper_queue_quarantine_entries 6", func() bool {
		return testutil.ToFloat64(e.m.QuarantineLen.WithLabelValues("api")) == 6
	})
	if ttl, _ := e.rdb.PTTL(ctx, keys.New(e.prefix).Quarantine("api")).Result(); ttl <= 0 {
		t.Errorf("quarantine TTL %v, want one (invariant 7)", ttl)
	}
	// No structure of the queue refers to a quarantined id any more.
	for _, k := range []string{e.a.Pending(), e.a.Active()} {
		left, _ := e.rdb.LRange(ctx, k, 0, -1).Result()
		for _, id := range left {
			if _, ok := want[id]; ok {
				t.Errorf("%s still holds %s", k, id)
			}
		}
	}
	for _, k := range []string{e.a.Scheduled(), e.a.Retry(), e.a.Lease()} {
		left, _ := e.rdb.ZRange(ctx, k, 0, -1).Result()
		for _, id := range left {
			if _, ok := want[id]; ok {
				t.Errorf("%s still holds %s", k, id)
			}
		}
	}
}

// An empty msg that reaches the queue while the dispatcher runs decodes to
// a task without id or type. It never reaches the handler (which would
// POST an empty body), goes to the quarantine at once, and the queue goes
// on delivering.
func TestEmptyMsgNeverReachesTheHandler(t *testing.T) {
	t.Parallel()
	// Periodic scans off (no full scans either: the first runs at start,
	// in the background, and could take the empty msg before a worker
	// dequeues it): only the dequeue of the empty msg can trigger one.
	e := newQEnv(t, shaping.QuarantineConfig{Interval: -1})
	ctx := context.Background()
	must(t, e.d.Start())
	must(t, e.rdb.HSet(ctx, e.a.Task("empty-late"), "msg", "", "state", "pending").Err())
	must(t, e.rdb.LPush(ctx, e.a.Pending(), "empty-late").Err())
	waitFor(t, 15*time.Second, "the empty msg in the quarantine", func() bool {
		return e.quarantined(t)["empty-late"] == shaping.ReasonEmptyMsg
	})
	p := queue.NewProducer(e.rdb, queue.ProducerConfig{Prefix: e.prefix})
	defer p.Close()
	_, err := p.Enqueue(ctx, queue.Task{Downstream: "api", Payload: []byte("after")})
	must(t, err)
	waitFor(t, 15*time.Second, "the next task delivered", func() bool { n, _ := e.delivered(); return n >= 1 })
	e.mu.Lock()
	defer e.mu.Unlock()
	var payloads []string
	for _, tk := range e.got {
		payloads = append(payloads, tk.ID+"/"+tk.Type+"/"+string(tk.Payload))
	}
	sort.Strings(payloads)
	if len(e.got) != 1 || string(e.got[0].Payload) != "after" {
		t.Errorf("handler received %q, want only the task enqueued after the empty msg", payloads)
	}
	if n := testutil.ToFloat64(e.m.Outcomes.WithLabelValues("api", "malformed")); n < 1 {
		t.Errorf("malformed outcomes = %v, want >= 1 (the empty msg was refused)", n)
	}
}

// A corrupt entry that appears while the dispatcher runs (here: a leased
// task whose msg is garbage) is found by the periodic scan of the active
// list and lease set.
func TestQuarantinePeriodicScan(t *testing.T) {
	t.Parallel()
	e := newQEnv(t, shaping.QuarantineConfig{Interval: 100 * time.Millisecond, FullInterval: time.Hour})
	ctx := context.Background()
	must(t, e.d.Start())
	must(t, e.rdb.HSet(ctx, e.a.Task("late-bad"), "msg", "\x0a\xff", "state", "active").Err())
	must(t, e.rdb.LPush(ctx, e.a.Active(), "late-bad").Err())
	must(t, e.rdb.ZAdd(ctx, e.a.Lease(), redis.Z{Score: float64(time.Now().Unix()), Member: "late-bad"}).Err())
	waitFor(t, 10*time.Second, "the leased garbage in the quarantine", func() bool {
		return e.quarantined(t)["late-bad"] == shaping.ReasonUndecodableMsg
	})
	// the counter follows the script's reply: the list can show the task
	// first (the full suite once read 0 in between)
	count := func() float64 {
		return testutil.ToFloat64(e.m.Quarantined.WithLabelValues("api", shaping.ReasonUndecodableMsg))
	}
	waitFor(t, 5*time.Second, "quarantined_total counted", func() bool { return count() >= 1 })
	if n := count(); n != 1 {
		t.Errorf("quarantined_total = %v, want 1", n)
	}
}
