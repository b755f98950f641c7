package redisconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"
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
