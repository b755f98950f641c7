package shaping

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/metrics"
)

// QuarantineConfig tunes the scan that moves corrupt entries out of each
// downstream's asynq queue. One undecodable task stops asynq's crash
// recovery (and its inspector) for the whole queue, so the dispatcher scans
// every queue at Start, before asynq's recoverer first runs, and again
// periodically. An entry is corrupt when its id has no task hash, the hash
// has no msg or an empty one, the msg is not an asynq TaskMessage, or the
// msg names another id (asynq could never complete or retry it). Such an
// entry is removed from every asynq structure and pushed, with its reason
// and raw msg, onto the queue's quarantine list ("<prefix>:quarantine:{<queue>}") in
// one script. The zero value is the defaults.
type QuarantineConfig struct {
	// Interval between scans of each queue's active list and lease set,
	// which asynq's crash recovery reads (a corrupt task anywhere else
	// reaches them when it is dequeued). Zero means 30s: asynq's recoverer
	// runs every minute, so a corrupt entry delays recovery by at most one
	// round. Negative disables the periodic scans.
	Interval time.Duration
	// FullInterval between scans of every structure (pending, scheduled,
	// retry, archived and completed too); zero means none. A full scan
	// reads every task's msg (one command per task, in every process), so
	// on a long backlog it costs more than releasing it; a corrupt entry
	// outside active and lease is caught when it is dequeued anyway (the
	// guard, then the next short scan).
	FullInterval time.Duration
	// MaxEntries is how many entries a quarantine list keeps (the oldest go
	// first); zero means 1000.
	MaxEntries int64
	// TTL of a quarantine list after its last entry; zero means 7 days.
	TTL time.Duration
}

// Reasons an entry is quarantined (the metric's reason label).
const (
	ReasonNoTaskHash     = "no_task_hash"
	ReasonNoMsg          = "no_msg"
	ReasonEmptyMsg       = "empty_msg"
	ReasonUndecodableMsg = "undecodable_msg"
	ReasonIDMismatch     = "id_mismatch"
)

const (
	scanPage      = 500      // ids read and judged per round trip
	quarantineMsg = 64 << 10 // msg bytes kept in an entry
	startScanMax  = 5 * time.Second
)

// taskMessage is asynq's TaskMessage type, registered by asynq's internal
// proto package: decoding with it is exactly asynq's DecodeMessage.
var taskMessage = func() protoreflect.MessageType {
	mt, err := protoregistry.GlobalTypes.FindMessageByName("asynq.TaskMessage")
	if err != nil {
		panic("shaping: asynq's TaskMessage is not registered: " + err.Error())
	}
	return mt
}()

// judge says why msg (nil: no msg field) of task id is corrupt, or "".
func judge(id string, msg *string) string {
	switch {
	case msg == nil:
		return ReasonNoMsg
	case *msg == "":
		return ReasonEmptyMsg
	}
	m := taskMessage.New()
	if err := proto.Unmarshal([]byte(*msg), m.Interface()); err != nil {
		return ReasonUndecodableMsg
	}
	if got := m.Get(m.Descriptor().Fields().ByName("id")).String(); got != id {
		return ReasonIDMismatch
	}
	return ""
}

// quarantine scans the dispatcher's queues.
type quarantine struct {
	env   quarantineEnv
	cfg   QuarantineConfig
	names []string // downstreams
	nudge chan struct{}
}

// quarantineEnv is what the scans need of the dispatcher, handed over
// when they are made.
type quarantineEnv struct {
	rdb      redis.UniversalClient
	store    *lua.Store
	space    keys.Space
	log      *slog.Logger
	m        *metrics.Metrics
	timeout  time.Duration // of one Redis call
	stopping <-chan struct{}
}

// newQuarantine scans the active list and lease set of every queue
// (what asynq's recoverer reads as soon as its server starts), bounded by
// startScanMax so that a Redis that is down does not hold Start up; its
// loop runs the background scans, which end when the dispatcher stops.
func newQuarantine(c QuarantineConfig, names []string, env quarantineEnv) *quarantine {
	if c.Interval == 0 {
		c.Interval = 30 * time.Second
	}
	if c.MaxEntries <= 0 {
		c.MaxEntries = 1000
	}
	if c.TTL <= 0 {
		c.TTL = 7 * 24 * time.Hour
	}
	q := &quarantine{env: env, cfg: c, names: append([]string(nil), names...), nudge: make(chan struct{}, 1)}
	ctx, cancel := context.WithTimeout(context.Background(), startScanMax)
	q.scanAll(ctx, false)
	cancel()
	return q
}

// loop runs a full scan at once (in the background: on a long backlog it
// reads every msg), again every FullInterval (a failed one at the next
// tick), and the short scan every Interval or when the guard asks.
func (q *quarantine) loop() {
	stop, cancelAll := context.WithCancel(context.Background())
	defer cancelAll()
	go func() { <-q.env.stopping; cancelAll() }()
	tick := q.cfg.Interval
	if tick < 0 {
		tick = q.cfg.FullInterval
	}
	if q.cfg.FullInterval > 0 && (tick < 0 || q.cfg.FullInterval < tick) {
		tick = q.cfg.FullInterval
	}
	if tick <= 0 {
		tick = time.Minute // only nudges: the ticker just wakes the loop
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	var lastFull time.Time // zero: a full scan is due (when enabled)
	nudged := false
	for {
		full := q.cfg.FullInterval > 0 && (lastFull.IsZero() || time.Since(lastFull) >= q.cfg.FullInterval)
		if full || nudged || q.cfg.Interval >= 0 {
			ctx, cancel := context.WithTimeout(stop, max(q.cfg.FullInterval, tick))
			if err := q.scanAll(ctx, full); err == nil && full {
				lastFull = time.Now()
			}
			cancel()
		}
		nudged = false
		select {
		case <-stop.Done():
			return
		case <-t.C:
		case <-q.nudge:
			nudged = true
		}
	}
}

// scanAll scans every downstream's queue; the first error is returned
// after all were tried.
func (q *quarantine) scanAll(ctx context.Context, full bool) error {
	var first error
	for _, ds := range q.names {
		if _, err := q.scan(ctx, ds, full); err != nil {
			q.env.log.Warn("shaping: scanning the queue for corrupt tasks", "downstream", ds, "err", err)
			first = cmpOrErr(first, err)
		}
	}
	return first
}

func cmpOrErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// scan judges the entries of downstream ds's queue (every structure when
// full, else active and lease) and quarantines the corrupt ones; it
// returns how many it moved. Its Redis cost is one LLEN, one range read per
// scanPage ids of each structure scanned and one pipelined HGET per id
// (plus one EXISTS per id without a msg, and one script call per corrupt
// entry). Ranges are read by index while asynq moves entries, so a scan may
// miss an entry that moved; the next one sees it, and an entry judged twice
// is harmless: the script re-checks it.
func (q *quarantine) scan(ctx context.Context, ds string, full bool) (int, error) {
	a := q.env.space.Asynq(ds)
	type structure struct {
		key, name string
		list      bool
	}
	all := []structure{{a.Active(), "active", true}, {a.Lease(), "lease", false}}
	if full {
		all = append(all, structure{a.Pending(), "pending", true}, structure{a.Scheduled(), "scheduled", false},
			structure{a.Retry(), "retry", false}, structure{a.Archived(), "archived", false},
			structure{a.Completed(), "completed", false})
	}
	seen := map[string]bool{}
	moved := 0
	for _, s := range all {
		for off := int64(0); ; off += scanPage {
			var ids []string
			var err error
			if s.list {
				ids, err = q.env.rdb.LRange(ctx, s.key, off, off+scanPage-1).Result()
			} else {
				ids, err = q.env.rdb.ZRange(ctx, s.key, off, off+scanPage-1).Result()
			}
			if err != nil {
				return moved, err
			}
			n, err := q.judgePage(ctx, a, ds, ids, seen, s.name == "completed")
			moved += n
			if err != nil {
				return moved, err
			}
			if len(ids) < scanPage {
				break
			}
		}
	}
	n, err := q.env.rdb.LLen(ctx, q.env.space.Quarantine(ds)).Result()
	if err != nil {
		return moved, err
	}
	if m := q.env.m; m != nil {
		m.QuarantineLen.WithLabelValues(ds).Set(float64(n))
	}
	return moved, nil
}

// judgePage reads the msg of each id not seen yet and quarantines the
// corrupt ones. A completed task's hash expires before asynq's janitor
// removes its id, so a missing hash there is not corruption.
func (q *quarantine) judgePage(ctx context.Context, a keys.AsynqQueue, ds string, ids []string, seen map[string]bool, completed bool) (int, error) {
	var todo []string
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			todo = append(todo, id)
		}
	}
	if len(todo) == 0 {
		return 0, nil
	}
	pipe := q.env.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(todo))
	for i, id := range todo {
		cmds[i] = pipe.HGet(ctx, a.Task(id), "msg")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	moved := 0
	for i, id := range todo {
		var msg *string
		if v, err := cmds[i].Result(); err == nil {
			msg = &v
		}
		reason := judge(id, msg)
		if reason == ReasonNoMsg {
			n, err := q.env.rdb.Exists(ctx, a.Task(id)).Result()
			if err != nil {
				return moved, err
			}
			if n == 0 {
				if completed {
					continue
				}
				reason = ReasonNoTaskHash
			}
		}
		if reason == "" {
			continue
		}
		ok, err := q.move(ctx, a, ds, id, reason, msg)
		if err != nil {
			return moved, err
		}
		if ok {
			moved++
		}
	}
	return moved, nil
}

// move runs the quarantine script for one entry; false when the entry had
// changed since it was judged.
func (q *quarantine) move(ctx context.Context, a keys.AsynqQueue, ds, id, reason string, msg *string) (bool, error) {
	judged := ""
	if msg != nil {
		judged = *msg
	}
	n, err := q.env.store.Quarantine(ctx, a, q.env.space.Quarantine(ds), lua.QuarantineArgs{ID: id, Reason: reason,
		Judged: judged, Keep: q.cfg.MaxEntries, TTL: q.cfg.TTL.Milliseconds(), Bytes: quarantineMsg})
	if err != nil {
		return false, fmt.Errorf("shaping: quarantine task %q of %q: %w", id, ds, err)
	}
	if n == 0 {
		return false, nil
	}
	q.env.log.Warn("shaping: moved a corrupt task to the quarantine", "downstream", ds, "id", id, "reason", reason,
		"quarantine", q.env.space.Quarantine(ds))
	if m := q.env.m; m != nil {
		m.Quarantined.WithLabelValues(ds, reason).Inc()
	}
	return true, nil
}

// taken moves a task the engine took but cannot read into the
// quarantine, with the reason judge gives its msg (take.lua reads a
// missing msg as empty); false when judge finds nothing wrong or the move
// failed (the engine then archives it).
func (q *quarantine) taken(ds, id string, msg []byte) bool {
	ctx, cancel := context.WithTimeout(context.Background(), q.env.timeout)
	defer cancel()
	a := q.env.space.Asynq(ds)
	m := string(msg)
	mp := &m
	if m == "" {
		// take.lua reads a hash without msg, and no hash, as "": tell
		// them apart as the scan does
		v, err := q.env.rdb.HGet(ctx, a.Task(id), "msg").Result()
		switch {
		case errors.Is(err, redis.Nil):
			mp = nil
		case err != nil:
			return false
		default:
			m = v
		}
	}
	reason := judge(id, mp)
	if reason == ReasonNoMsg {
		if n, err := q.env.rdb.Exists(ctx, a.Task(id)).Result(); err == nil && n == 0 {
			reason = ReasonNoTaskHash
		}
	}
	if reason == "" {
		return false
	}
	q.malformed(ds)
	ok, err := q.move(ctx, a, ds, id, reason, mp)
	if err != nil {
		q.env.log.Warn("shaping: quarantine of a task taken failed; it is archived", "downstream", ds, "id", id, "err", err)
	}
	return err == nil && ok
}

// guard keeps a task asynq decoded from an empty or foreign msg (no id, or
// no type: asynq's client refuses an empty type) from reaching a handler:
// asynq could not complete it anyway. It asks for a scan, which
// quarantines the entry behind it.
func (q *quarantine) guard(ds string, next asynq.HandlerFunc) asynq.HandlerFunc {
	return func(ctx context.Context, t *asynq.Task) error {
		if id, _ := asynq.GetTaskID(ctx); id == "" || t.Type() == "" {
			q.malformed(ds)
			select {
			case q.nudge <- struct{}{}:
			default:
			}
			return fmt.Errorf("shaping: downstream %q: task %q has no id or no type (corrupt msg); it goes to the quarantine: %w",
				ds, id, asynq.SkipRetry)
		}
		return next(ctx, t)
	}
}

// malformed counts a task of ds that cannot be delivered as the release
// path's outcome "malformed".
func (q *quarantine) malformed(ds string) {
	if m := q.env.m; m != nil {
		m.Outcomes.WithLabelValues(ds, "malformed").Inc()
	}
}
