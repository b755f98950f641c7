package replay

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Embedded is the Redis a replay runs on: a miniredis in this process,
// reached without a socket, whose scripts run in one Lua state kept from
// call to call (scriptHost) instead of a new one per call, and whose keys
// expire on the replay's clock (Advance) instead of the wall clock. A
// key is only ever dropped after its TTL has passed in the log's time,
// so a replay slower than the log it replays loses no limiter state. Its
// data lives as long as it does. Close it when done.
type Embedded struct {
	mr     *miniredis.Miniredis
	client *redis.Client
	at     time.Time // the log time the TTLs have been advanced to
}

// ttlStep is how far the log time moves before the TTLs are advanced:
// miniredis walks every key to do it. Expiring up to ttlStep late
// changes no decision (every script computes from the times it stored,
// and a key whose TTL passed holds nothing that counts); expiring early
// would.
const ttlStep = time.Second

// NewEmbedded starts an Embedded Redis.
func NewEmbedded() (*Embedded, error) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		return nil, fmt.Errorf("replay: embedded redis: %w", err)
	}
	srv := mr.Server()
	host := newScriptHost(srv)
	c := redis.NewClient(&redis.Options{
		Addr: mr.Addr(),
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			a, b := net.Pipe()
			srv.ServeConn(b)
			return a, nil
		},
		PoolSize: 2,
	})
	c.AddHook(scriptHook{host})
	return &Embedded{mr: mr, client: c}, nil
}

// Client is a client of e.
func (e *Embedded) Client() redis.UniversalClient { return e.client }

// Advance moves e's TTL clock to t, the log time of the next decision.
// The clock never goes back, and moves in steps of ttlStep.
func (e *Embedded) Advance(t time.Time) {
	if e.at.IsZero() {
		e.at = t
		return
	}
	if d := t.Sub(e.at); d >= ttlStep {
		e.mr.FastForward(d)
		e.at = t
	}
}

// Close stops e.
func (e *Embedded) Close() error {
	err := e.client.Close()
	e.mr.Close()
	return err
}

// scriptHook answers the script commands of go-redis in process; every
// other command goes to miniredis through a pipe.
type scriptHook struct{ h *scriptHost }

func (scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (k scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c, ok := cmd.(*redis.Cmd)
		if !ok {
			return next(ctx, cmd)
		}
		switch cmd.Name() {
		case "eval", "evalsha", "eval_ro", "evalsha_ro":
			k.h.process(c)
			return c.Err()
		}
		return next(ctx, cmd)
	}
}

func (scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
