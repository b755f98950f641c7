package take

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/redis/go-redis/v9"
)

// applyProbes runs in the loop with the idle lanes' pending lengths: a
// lane with work takes at once, the others back off.
func (e *Engine) applyProbes(ls []*lane, cmds []redis.Cmder, err error, at time.Time) {
	if err != nil {
		e.redisError()
		e.warnRedis("take: idle check failed", "downstreams", len(ls), "err", err)
	}
	for i, l := range ls {
		l.pending = false
		if err != nil || i >= len(cmds) {
			l.failed(at, e.cfg.IdlePoll)
			continue
		}
		if n, _ := cmds[i].(*redis.IntCmd).Result(); n > 0 {
			l.wake(at)
		} else {
			l.toIdle(at, e.cfg.IdlePoll)
		}
	}
}

// startExtend extends the leases of every task this process holds for l,
// on the Redis clock. A task whose lease is gone was recovered by another
// process (its lease expired unextended); it is counted when it finishes.
func (e *Engine) startExtend(l *lane, now time.Time) {
	ids := make([]string, 0, len(l.held))
	for id := range l.held {
		ids = append(ids, id)
	}
	ok := e.submit(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		_, held, err := e.store.TakeExtend(ctx, l.q, e.cfg.Lease, ids...)
		cancel()
		e.post(func() { e.applyExtend(l, ids, held, err) })
	})
	if !ok {
		return
	}
	l.extending = true
	l.nextExtend = now.Add(e.cfg.Extend)
}

func (e *Engine) applyExtend(l *lane, ids []string, held []bool, err error) {
	l.extending = false
	if err != nil {
		e.redisError()
		e.warnRedis("take: lease extension failed", "downstream", l.d.Name, "err", err)
		l.nextExtend = time.Now().Add(time.Second)
		return
	}
	for i, ok := range held {
		if !ok {
			e.cfg.Logger.Warn("take: lease lost", "downstream", l.d.Name, "task", ids[i])
		}
	}
}

// leaseToken is a new take's token for the leases of a concurrency cap
// (lua.TakeLeases.Token): a task taken again gets a lease of its own,
// not the one its earlier take left.
func (e *Engine) leaseToken() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b) + ":"
}
