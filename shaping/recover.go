package shaping

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/lua"
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
func (d *Dispatcher) livenessLoop(runners []*runner) {
	clk := d.cfg.Clock
	var scanUntil, troubleAt, lastScan time.Time
	for {
		ctx, cancel := context.WithTimeout(context.Background(), d.cfg.RedisTimeout)
		dead, err := d.announce(ctx)
		now := clk.Now()
		if err != nil || d.trouble.Swap(false) {
			troubleAt = now
			scanUntil = now.Add(troubleSettle + asynqLease)
		}
		if err == nil && dead > 0 {
			d.log.Info("shaping: a worker process stopped announcing itself; returning its held tasks to their queues", "processes", dead)
			scanUntil = maxTime(scanUntil, now.Add(asynqLease))
		}
		settled := now.Sub(troubleAt) >= troubleSettle
		if err == nil && settled && (now.Before(scanUntil) || now.Sub(lastScan) > time.Minute) {
			d.recoverAll(ctx, runners)
			lastScan = now
		}
		cancel()
		t := clk.NewTimer(livenessInterval)
		select {
		case <-d.stopping:
			t.Stop()
			ctx, cancel := context.WithTimeout(context.Background(), d.cfg.RedisTimeout)
			d.rdb.ZRem(ctx, d.space.Processes(), d.pid)
			cancel()
			return
		case <-t.C():
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// announce records this process as alive, removes (and counts) the
// processes that have been silent for RecoverAfter, and notes how many
// are alive (d.procs, for the fair lanes' share of the horizon).
func (d *Dispatcher) announce(ctx context.Context) (int64, error) {
	k := d.space.Processes()
	now := time.Now()
	var gone, live *redis.IntCmd
	_, err := d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, k, redis.Z{Score: float64(now.Unix()), Member: d.pid})
		gone = p.ZRemRangeByScore(ctx, k, "-inf", "("+strconv.FormatInt(now.Add(-d.cfg.RecoverAfter).Unix(), 10))
		p.Expire(ctx, k, time.Hour)
		live = p.ZCard(ctx, k)
		return nil
	})
	if err != nil {
		return 0, err
	}
	d.procs.Store(max(live.Val(), 1))
	return gone.Val(), nil
}

// recoverAll runs recover.lua on every downstream's queue.
func (d *Dispatcher) recoverAll(ctx context.Context, runners []*runner) {
	for _, r := range runners {
		moved, dropped, err := d.recoverQueue(ctx, r.ds.Name, 0)
		if err != nil {
			d.log.Warn("shaping: recovery scan failed", "downstream", r.ds.Name, "err", err)
			continue
		}
		if moved+dropped > 0 {
			d.log.Info("shaping: returned a dead process's held tasks to the front of the queue", "downstream", r.ds.Name, "tasks", moved, "without_hash", dropped)
			if m := d.m; m != nil {
				m.Recovered.WithLabelValues(r.ds.Name).Add(float64(moved))
			}
		}
	}
}

// recoverQueue moves downstream ds's tasks whose leases have not been
// extended for RecoverAfter back to the front of its queue (now: unix
// seconds for tests, 0 for Redis TIME).
func (d *Dispatcher) recoverQueue(ctx context.Context, ds string, now int64) (moved, dropped int64, err error) {
	q := d.space.Asynq(ds)
	var levels []string
	for _, lv := range priority.Levels {
		levels = append(levels, d.space.TakePriority(ds, lv))
	}
	total := int64(0)
	for {
		m, dr, err := d.store.Recover(ctx, q, lua.RecoverArgs{Lease: int64(asynqLease / time.Second),
			Stale: int64(d.cfg.RecoverAfter / time.Second), Batch: recoverBatch, Now: now, Skew: int64(recoverSkew / time.Second),
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
