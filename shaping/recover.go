package shaping

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/metrics"
	"github.com/shaper-io/shaper/internal/priority"
)

// Crash recovery, faster than asynq's. asynq returns a dead worker's
// tasks 60-120 s after the crash (a 30 s lease, a further 30 s cutoff, a
// recoverer that runs once a minute) and counts a retry. Each dispatcher
// instead announces itself in a ZSET of live processes every
// livenessInterval; when one stops announcing, the others scan their
// queues for leases that stopped being extended and put those tasks back
// at the front (recover.lua), without consuming an attempt.

const (
	// livenessInterval: how often a process announces itself (one ZADD,
	// one ZRANGEBYSCORE and one EXPIRE per process, whatever the number of
	// downstreams).
	livenessInterval = 2 * time.Second
	// asynqLease is asynq's lease duration (rdb.LeaseDuration); its
	// heartbeat extends held tasks' leases to now + this every 5 s.
	asynqLease = 30 * time.Second
	// recoverBatch bounds the tasks one script call moves.
	recoverBatch = 200
	// recoverSkew is the clock difference between hosts that recovery
	// tolerates: leases that expired more than asynqLease - recoverSkew
	// ago are left to asynq's recoverer (see recover.lua).
	recoverSkew = 5 * time.Second
	// troubleSettle: how long after trouble reaching Redis no recovery
	// scan runs, so that asynq's heartbeat (every 5 s, failing while Redis
	// was away) has extended live leases again and none looks stale.
	troubleSettle = 7 * time.Second
)

// liveness announces this process in the ZSET of live processes and
// returns the tasks of processes gone silent: one per Dispatcher, made
// with what it needs (Dispatcher.liveness).
type liveness struct {
	rdb          redis.UniversalClient
	store        *lua.Store
	space        keys.Space
	pid          string
	clock        Clock
	timeout      time.Duration // of one Redis call
	recoverAfter time.Duration
	log          *slog.Logger
	m            *metrics.Metrics
	trouble      *atomic.Bool    // set on trouble reaching Redis; read and cleared here
	procs        *atomic.Int64   // live processes, as the last announce counted them
	protocols    map[int]int     // live processes by keys.Protocol, as last read (the loop's)
	fleet        <-chan struct{} // another process joined or left: count again now
	stopping     <-chan struct{}
}

// newProcessID names this process in the liveness ZSET.
func newProcessID() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	rand.Read(b)
	return host + ":" + strconv.Itoa(os.Getpid()) + ":" + hex.EncodeToString(b)
}

// livenessLoop announces this process and, when another one has gone
// silent for RecoverAfter, recovers stale leases on every downstream for
// the next lease duration (a dead process's last extensions go stale over
// that span). After this process had trouble reaching Redis it does the
// same: a dequeue whose reply was lost leaves its task in active under a
// lease no process extends, found once it has been silent for
// RecoverAfter. It also scans once at start, for tasks stranded before
// this process ran, and then every minute as a fallback. No scan runs
// until troubleSettle after the last trouble, so that the heartbeats of
// live processes, which failed too, have extended their leases again.
func (v *liveness) loop(downstreams []string) {
	clk := v.clock
	var scanUntil, troubleAt, lastScan, fastUntil time.Time
	joined := false
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), v.timeout)
		dead, staleIn, err := v.announce(ctx, !joined)
		joined = joined || err == nil
		now := clk.Now()
		if err != nil || v.trouble.Swap(false) {
			troubleAt = now
			scanUntil = now.Add(troubleSettle + asynqLease)
		}
		if err == nil && dead > 0 {
			v.log.Info("shaping: a worker process stopped announcing itself; returning its held tasks to their queues", "processes", dead)
			scanUntil = maxTime(scanUntil, now.Add(asynqLease))
			fastUntil = now.Add(2 * engineExtend)
		}
		settled := now.Sub(troubleAt) >= troubleSettle
		if err == nil && settled && (now.Before(scanUntil) || now.Sub(lastScan) > time.Minute) {
			v.recoverAll(ctx, downstreams)
			lastScan = now
		}
		cancel()
		t := clk.NewTimer(nextCheck(i, staleIn, now.Before(fastUntil)))
		select {
		case <-v.stopping:
			t.Stop()
			v.leave()
			return
		case <-v.fleet:
			t.Stop()
		case <-t.C():
		}
	}
}

// startAnnounces are the first waits between announces: processes that
// start together miss each other's join while their subscriptions come
// up, so each counts again soon after its start.
var startAnnounces = []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second}

// scanEvery is the wait between announces (and recovery scans) for
// 2 × engineExtend after a process was found dead: its leases turn stale
// at their own times, up to engineExtend after its last announce. (After
// trouble reaching Redis the scans stay every livenessInterval: every
// process scans then, one script per downstream.)
const scanEvery = 500 * time.Millisecond

// nextCheck is the wait after the i-th announce: the start's short waits,
// then livenessInterval; sooner when another process's silence reaches
// RecoverAfter within it (staleIn > 0), so a dead process is found as
// soon as it can be, and at most scanEvery just after one was (fast).
func nextCheck(i int, staleIn time.Duration, fast bool) time.Duration {
	d := livenessInterval
	if i < len(startAnnounces) {
		d = startAnnounces[i]
	}
	if fast {
		d = min(d, scanEvery)
	}
	if staleIn > 0 {
		d = min(d, staleIn+10*time.Millisecond) // just past the second it turns stale
	}
	return d
}

// leave takes this process out of the live ones and says so, so the
// others count again at once (the fleet's budget of tasks taken shrinks).
func (v *liveness) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), v.timeout)
	defer cancel()
	v.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRem(ctx, v.space.Processes(), v.pid)
		p.Publish(ctx, v.space.ProcessesChannel(), "leave")
		return nil
	})
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// announce records this process as alive, removes (and counts) the
// processes that have been silent for RecoverAfter, and notes how many
// are alive (procs: the take's budget is workers × the live processes). With join it
// also tells the others (ProcessesChannel), which then count again at once.
//
// staleIn is how long until the most silent other process has been silent
// for RecoverAfter (0: none other, or it is already), so the loop looks
// again just then.
func (v *liveness) announce(ctx context.Context, join bool) (gone int64, staleIn time.Duration, err error) {
	k := v.space.Processes()
	now := time.Now()
	var removed, live *redis.IntCmd
	var oldest *redis.ZSliceCmd
	_, err = v.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, k, redis.Z{Score: float64(now.Unix()), Member: v.pid})
		removed = p.ZRemRangeByScore(ctx, k, "-inf", "("+strconv.FormatInt(now.Add(-v.recoverAfter).Unix(), 10))
		p.Expire(ctx, k, time.Hour)
		live = p.ZCard(ctx, k)
		oldest = p.ZRangeWithScores(ctx, k, 0, 0)
		if join {
			p.Publish(ctx, v.space.ProcessesChannel(), "join")
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	if prev := v.procs.Swap(max(live.Val(), 1)); prev != live.Val() || join {
		v.checkProtocols(ctx)
	}
	if o := oldest.Val(); len(o) == 1 && o[0].Member != v.pid {
		// removed by the first announce at which now - RecoverAfter, in
		// whole seconds, is past its score
		at := time.Unix(int64(o[0].Score)+1, 0).Add(v.recoverAfter)
		staleIn = max(at.Sub(now), 0)
	}
	return removed.Val(), staleIn, nil
}

// checkProtocols reads the live processes' protocols (when the fleet
// changed: a member says its protocol) and warns while some process
// keeps other rules of the shared state than this one's.
func (v *liveness) checkProtocols(ctx context.Context) {
	members, err := v.rdb.ZRange(ctx, v.space.Processes(), 0, -1).Result()
	if err != nil {
		return
	}
	by := map[int]int{}
	for _, m := range members {
		by[keys.MemberProtocol(m)]++
	}
	if v.m != nil {
		v.m.FleetProtocols.WithLabelValues().Set(float64(len(by)))
	}
	if len(by) > 1 && !maps.Equal(by, v.protocols) {
		v.log.Warn("shaping: processes of another shaper version share this Redis and keep other rules of its state (per-key ceilings and caps may not hold): upgrade every process together",
			"this_protocol", keys.Protocol, "processes_by_protocol", fmt.Sprint(by))
	}
	v.protocols = by
}

// recoverAll runs recover.lua on every downstream's queue.
func (v *liveness) recoverAll(ctx context.Context, downstreams []string) {
	for _, ds := range downstreams {
		moved, dropped, err := v.recoverQueue(ctx, ds, 0)
		if err != nil {
			v.log.Warn("shaping: recovery scan failed", "downstream", ds, "err", err)
			continue
		}
		if moved+dropped > 0 {
			v.log.Info("shaping: returned a dead process's held tasks to the front of the queue", "downstream", ds, "tasks", moved, "without_hash", dropped)
			if m := v.m; m != nil {
				m.Recovered.WithLabelValues(ds).Add(float64(moved))
			}
		}
	}
}

// recoverQueue moves downstream ds's tasks whose leases have not been
// extended for RecoverAfter back to the front of its queue (now: unix
// seconds for tests, 0 for Redis TIME).
func (v *liveness) recoverQueue(ctx context.Context, ds string, now int64) (moved, dropped int64, err error) {
	q := v.space.Asynq(ds)
	var levels []string
	for _, lv := range priority.Levels {
		levels = append(levels, v.space.TakePriority(ds, lv))
	}
	total := int64(0)
	for {
		m, dr, err := v.store.Recover(ctx, q, lua.RecoverArgs{Lease: int64(asynqLease / time.Second),
			Stale: int64(v.recoverAfter / time.Second), Batch: recoverBatch, Now: now, Skew: int64(recoverSkew / time.Second),
			Levels: levels})
		if err != nil {
			return moved, dropped, fmt.Errorf("shaping: recover %q: %w", ds, err)
		}
		moved, dropped = moved+m, dropped+dr
		if total += m + dr; m+dr < recoverBatch || total > 100*recoverBatch {
			return moved, dropped, nil
		}
	}
}
