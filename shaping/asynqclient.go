package shaping

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// asynqClient is the Redis client a downstream's asynq server uses: the
// dispatcher's, with two additions on scripts (every asynq write that
// moves a task is a script).
//
// Finishing writes are retried. asynq finishes a task (done, completed,
// archived) with one script call; when that call fails, it hands a retry
// to its syncer, but the retry runs under the context the failed call
// was given, cancelled as that call returns (asynq v0.26
// processor.markAsDone), so it can never succeed. The task then stays in
// the active list after its release, and whatever recovers it (shaper's
// scan or asynq's recoverer) delivers it a second time. Here a finishing
// write that fails on the network is tried again, backing off, until it
// lands or its context (the task's lease) ends. While it is retried the
// worker is still asynq's, so its heartbeat keeps extending the lease
// and no recovery scan takes the task. A finishing write is safe to
// repeat: each is guarded by LREM on active, and a task that has left
// for good never comes back to active.
//
// Network errors are noted (trouble): a dequeue whose reply was lost
// strands its task in active under a lease nobody extends, and the
// liveness loop scans for such leases after any trouble (recover.go).
type asynqClient struct {
	redis.UniversalClient
	clock    Clock
	stopping <-chan struct{}
	trouble  func() // a script call failed on the network
	retried  func() // a finishing write is tried again
}

func (c asynqClient) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return c.settle(ctx, keys, func() *redis.Cmd { return c.UniversalClient.EvalSha(ctx, sha1, keys, args...) })
}

func (c asynqClient) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return c.settle(ctx, keys, func() *redis.Cmd { return c.UniversalClient.Eval(ctx, script, keys, args...) })
}

const (
	finishRetryMin = 50 * time.Millisecond
	finishRetryMax = time.Second
)

// settle runs a script call, and again while it fails on the network if
// it is a finishing write with a deadline (see asynqClient).
func (c asynqClient) settle(ctx context.Context, keys []string, run func() *redis.Cmd) *redis.Cmd {
	cmd := run()
	if !transient(cmd.Err()) {
		return cmd
	}
	c.trouble()
	if _, ok := ctx.Deadline(); !ok || !finishing(keys) {
		return cmd
	}
	for wait := finishRetryMin; ; wait = min(2*wait, finishRetryMax) {
		t := c.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return cmd
		case <-c.stopping:
			t.Stop()
			return run() // one last try at shutdown; recovery covers the rest
		case <-t.C():
		}
		c.retried()
		if cmd = run(); !transient(cmd.Err()) {
			return cmd
		}
	}
}

// finishing reports whether an asynq script with these keys moves a task
// out of active for good (done, completed, archived): it names the active
// list and no list the task could return through.
func finishing(keys []string) bool {
	active := false
	for _, k := range keys {
		switch {
		case strings.HasSuffix(k, ":active"):
			active = true
		case strings.HasSuffix(k, ":pending"), strings.HasSuffix(k, ":retry"), strings.HasSuffix(k, ":scheduled"):
			return false
		}
	}
	return active
}

// transient reports whether err is a failure to talk to Redis, or a
// reply saying it cannot serve yet (loading its data after a restart, a
// failover): not a script's own error, and not the caller's context
// ending.
func transient(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return true
	}
	for _, p := range []string{"LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}
