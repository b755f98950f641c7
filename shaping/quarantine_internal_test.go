package shaping

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
)

// counter counts the Redis commands sent through a client, leaving out a
// new connection's handshake (HELLO, CLIENT SETINFO).
type counter struct{ n atomic.Int64 }

func (c *counter) add(cmds ...redis.Cmder) {
	for _, cmd := range cmds {
		if cmd.Name() != "hello" && cmd.Name() != "client" {
			c.n.Add(1)
		}
	}
}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.add(cmd); return next(ctx, cmd) }
}
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.add(cmds...); return next(ctx, cmds) }
}

// The scan's Redis cost, counted command by command: the periodic scan of
// an idle queue with a backlog of 1200 is 3 commands (it reads only the
// active list and lease set); the full scan reads each id's msg once, in
// pages of scanPage.
func TestQuarantineScanCost(t *testing.T) {
	t.Parallel()
	const backlog = 1200
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	// asynq's client directly: package queue imports this one.
	ac := asynq.NewClientFromRedisClient(rdb)
	for i := 0; i < backlog; i++ {
		if _, err := ac.Enqueue(asynq.NewTask("t", []byte(fmt.Sprint(i))), asynq.Queue(keys.New(prefix).Queue("api"))); err != nil {
			t.Fatal(err)
		}
	}
	var c counter
	rdb.AddHook(&c)
	d := New(rdb, Config{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := d.Add(Downstream{Name: "api", Rate: limiters.PerSecond(1), Handler: func(context.Context, *Task) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	q := &quarantine{env: quarantineEnv{rdb: d.rdb, store: d.store, space: d.space, log: d.log, timeout: d.cfg.RedisTimeout, stopping: d.stopping},
		cfg: QuarantineConfig{MaxEntries: 10, TTL: 1e9}, names: []string{"api"}}
	for _, st := range []struct {
		full bool
		max  int64
	}{
		{false, 3}, // LRANGE active, ZRANGE lease, LLEN quarantine
		// 3 LRANGE pages of pending, one range read of each other
		// structure, one HGET per id, LLEN.
		{true, backlog + (backlog/scanPage + 1) + 6 + 1},
	} {
		before := c.n.Load()
		moved, err := q.scan(context.Background(), "api", st.full)
		if err != nil || moved != 0 {
			t.Fatalf("full=%v: scan moved %d, err %v; want 0, nil", st.full, moved, err)
		}
		got := c.n.Load() - before
		t.Logf("full=%v scan of a queue with %d pending: %d commands", st.full, backlog, got)
		if got > st.max {
			t.Errorf("full=%v: %d commands, want <= %d", st.full, got, st.max)
		}
	}
}
