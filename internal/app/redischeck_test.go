package app_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/app"
	"github.com/shaper-io/shaper/internal/redisconn"
)

// rediss:// against a plain-text Redis: every call says "TLS handshake"
// and names the address, and callers that retry at once (asynq's dequeue
// loop does) are held back by go-redis's dial backoff instead of spinning
// on an instant "context deadline exceeded".
func TestRedissAgainstPlainTextRedis(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	rdb, closeRedis, err := app.OpenRedis(redisconn.Options{URL: "rediss://" + srv.Addr, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer closeRedis()
	err = ping(rdb)
	if !errors.Is(err, redisconn.ErrTLSHandshake) || !strings.Contains(err.Error(), "TLS handshake with "+srv.Addr+" failed") {
		t.Fatalf("ping: %v, want a TLS handshake error naming %s", err, srv.Addr)
	}
	// 16 callers in a tight loop for 3s. Before the fix, once the pool gave
	// up dialing, each call failed in microseconds: hundreds of thousands.
	// With go-redis's retry backoff (at least 8ms) at most 16×3s/8ms = 6000.
	var calls atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(3 * time.Second)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				rdb.Ping(context.Background())
				calls.Add(1)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d failing calls in 3s", calls.Load())
	if n := calls.Load(); n > 8000 {
		t.Errorf("%d failing calls in 3s from 16 callers, want <= 8000 (a backoff between tries)", n)
	}
}
