package shaping

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"
)

// The key lists of asynq v0.26's scripts (internal/rdb): only the writes
// that move a task out of active for good are retried.
func TestFinishingWrites(t *testing.T) {
	q := "asynq:{p:api}"
	for _, c := range []struct {
		name string
		keys []string
		want bool
	}{
		{"done", []string{q + ":active", q + ":lease", q + ":t:id", q + ":processed:2026-12-01", q + ":processed"}, true},
		{"mark as complete", []string{q + ":active", q + ":lease", q + ":completed", q + ":t:id", q + ":processed:2026-12-01", q + ":processed"}, true},
		{"archive", []string{q + ":t:id", q + ":active", q + ":lease", q + ":archived", q + ":processed:2026-12-01", q + ":failed:2026-12-01", q + ":processed", q + ":failed"}, true},
		{"requeue", []string{q + ":active", q + ":lease", q + ":pending", q + ":t:id"}, false},
		{"retry", []string{q + ":t:id", q + ":active", q + ":lease", q + ":retry", q + ":processed:2026-12-01", q + ":failed:2026-12-01", q + ":processed", q + ":failed"}, false},
		{"dequeue", []string{q + ":pending", q + ":paused", q + ":active", q + ":lease"}, false},
		{"forward", []string{q + ":scheduled", q + ":pending"}, false},
	} {
		if got := finishing(c.keys); got != c.want {
			t.Errorf("%s: finishing = %v, want %v", c.name, got, c.want)
		}
	}
}

// Failures to reach Redis, and replies saying it cannot serve yet, are
// transient; a script's own error, a nil reply and the caller's context
// ending are not.
func TestTransient(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{dial, true},
		{fmt.Errorf("redis eval error: %w", dial), true},
		{errors.New("i/o timeout"), true},
		{redis.Nil, false},
		{context.Canceled, false},
		{context.DeadlineExceeded, false},
		{replyErr("NOT FOUND"), false},
		{replyErr("LOADING Redis is loading the dataset in memory"), true},
		{replyErr("CLUSTERDOWN The cluster is down"), true},
	} {
		if got := transient(c.err); got != c.want {
			t.Errorf("transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// replyErr is a reply error as go-redis returns it.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}
