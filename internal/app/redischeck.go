package app

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/config"
)

// ErrTLSHandshake marks a connection whose TCP dial worked but whose TLS
// handshake did not: a rediss:// URL pointed at a plain-text Redis, a
// certificate that does not verify, or a server that never answers TLS.
var ErrTLSHandshake = errors.New("TLS handshake failed")

// TLSHandshakeError says which address refused the TLS handshake and why.
type TLSHandshakeError struct {
	Addr string
	Err  error
}

func (e *TLSHandshakeError) Error() string {
	hint := ""
	var rh tls.RecordHeaderError
	var ne net.Error
	if errors.As(e.Err, &rh) || errors.Is(e.Err, context.DeadlineExceeded) || (errors.As(e.Err, &ne) && ne.Timeout()) {
		hint = " (is it a plain-text Redis? then use redis://, not rediss://)"
	}
	return fmt.Sprintf("TLS handshake with %s failed: %v%s", e.Addr, e.Err, hint)
}

func (e *TLSHandshakeError) Is(target error) bool { return target == ErrTLSHandshake }
func (e *TLSHandshakeError) Unwrap() error        { return e.Err }

// tlsDialer dials TCP, then does the TLS handshake itself so that a failed
// handshake says so and names the address. The error is a dial
// *net.OpError: go-redis retries dial errors after a backoff, but returns a
// bare "context deadline exceeded" (what a handshake against a plain-text
// server ends in) at once, and asynq's dequeue loop, which does not sleep
// after an error, then spins a CPU core on it.
func tlsDialer(cfg *tls.Config, timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: timeout, KeepAlive: 5 * time.Minute}
		raw, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c := cfg.Clone()
		if c.ServerName == "" {
			host, _, _ := net.SplitHostPort(addr)
			c.ServerName = host
		}
		conn := tls.Client(raw, c)
		hctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if err := conn.HandshakeContext(hctx); err != nil {
			raw.Close()
			return nil, &net.OpError{Op: "dial", Net: network, Addr: raw.RemoteAddr(),
				Err: &TLSHandshakeError{Addr: addr, Err: err}}
		}
		return conn, nil
	}
}

// checkRedisAtStart pings Redis before anything starts. Errors that waiting
// cannot cure are returned as one line, so shaper refuses to start: a TLS
// handshake refused (a plain-text probe says whether the server speaks
// plain Redis), or a database index the server does not have. Any other
// failure (Redis down or slow) is returned as warn, to be logged: workers
// hold off until Redis answers.
func checkRedisAtStart(rdb redis.UniversalClient, cfg config.Redis, d time.Duration) (warn, err error) {
	perr := Ping(rdb, d)
	if perr == nil {
		return nil, nil
	}
	var he *TLSHandshakeError
	if errors.As(perr, &he) {
		if probePlainRedis(he.Addr, min(d, time.Second)) {
			return nil, fmt.Errorf("redis %s: TLS handshake failed: the server at %s speaks plain-text Redis, not TLS (use redis://, not rediss://)",
				cfg.String(), he.Addr)
		}
		// A certificate that does not verify or a server that answers
		// something else is permanent; a handshake that timed out may be
		// a slow server, so it only warns, like Redis being down.
		var ne net.Error
		if !errors.Is(he.Err, context.DeadlineExceeded) && !(errors.As(he.Err, &ne) && ne.Timeout()) {
			return nil, fmt.Errorf("redis %s: %v", cfg.String(), he)
		}
	}
	if msg := perr.Error(); strings.Contains(msg, "DB index is out of range") {
		return nil, fmt.Errorf("config: redis.url: database %d does not exist on the server (%s; Redis has 16 unless its config says more)",
			dbIndex(rdb), msg)
	}
	return perr, nil
}

// probePlainRedis reports whether addr answers a plain-text PING the way
// Redis does (+PONG, or an error reply such as -NOAUTH).
func probePlainRedis(addr string, d time.Duration) bool {
	c, err := net.DialTimeout("tcp", addr, d)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && (strings.HasPrefix(line, "+") || strings.HasPrefix(line, "-"))
}

func dbIndex(rdb redis.UniversalClient) int {
	if c, ok := rdb.(*redis.Client); ok {
		return c.Options().DB
	}
	return 0
}
