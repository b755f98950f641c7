// Package redisconn opens the Redis a config names: a URL (redis:// or
// rediss://), a Cluster or a Sentinel group. It is what the producer side
// (the enqueue CLI) and the daemon share; the daemon's embedded Redis and
// its start-up checks stay in internal/app, so a producer links neither.
package redisconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/config"
)

// ErrEmbedded is returned by Open for a config that names no Redis (no
// URL, Cluster or Sentinel): only the daemon can start the embedded one.
var ErrEmbedded = errors.New("redisconn: the config names no Redis (redis.url, redis.cluster or redis.sentinel)")

// Open connects as cfg says. The returned close func closes the client.
// A config that names no Redis returns ErrEmbedded.
func Open(cfg config.Redis) (redis.UniversalClient, func(), error) {
	if cfg.Embedded() {
		return nil, nil, ErrEmbedded
	}
	password, err := cfg.Password()
	if err != nil {
		return nil, nil, err
	}
	timeout := time.Duration(cfg.Timeout)
	tlsCfg, err := caConfig(cfg.TLSCAFile)
	if err != nil {
		return nil, nil, err
	}
	var dialer func(ctx context.Context, network, addr string) (net.Conn, error)
	if tlsCfg != nil {
		dialer = tlsDialer(tlsCfg, timeout)
	}
	switch {
	case len(cfg.Cluster) > 0:
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.Cluster, Username: cfg.Username, Password: password,
			TLSConfig: tlsCfg, Dialer: dialer, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, ContextTimeoutEnabled: true})
		c.AddHook(reloadOnNetError{c})
		return c, func() { c.Close() }, nil
	case cfg.Sentinel != nil:
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: cfg.Sentinel.Master, SentinelAddrs: cfg.Sentinel.Addrs,
			Username: cfg.Username, Password: password, TLSConfig: tlsCfg, Dialer: dialer, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
			ContextTimeoutEnabled: true, MaxRetries: 1})
		return c, func() { c.Close() }, nil
	}
	return openURL(cfg, password, tlsCfg, timeout)
}

// caConfig reads the CA file, if one is named, into a TLS config.
func caConfig(file string) (*tls.Config, error) {
	if file == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("config: redis.tls_ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("config: redis.tls_ca_file: no PEM certificate in %s", file)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

func openURL(cfg config.Redis, password string, tlsCfg *tls.Config, timeout time.Duration) (redis.UniversalClient, func(), error) {
	opt, err := redis.ParseURL(cfg.URL)
	if err != nil {
		return nil, nil, fmt.Errorf("config: redis.url: %v", redactErr(err, cfg.URL))
	}
	if password != "" {
		opt.Password = password
	}
	if cfg.Username != "" {
		opt.Username = cfg.Username
	}
	if tlsCfg != nil {
		if opt.TLSConfig == nil {
			return nil, nil, fmt.Errorf("config: redis.tls_ca_file is set but redis.url is not rediss://")
		}
		opt.TLSConfig.RootCAs = tlsCfg.RootCAs
	}
	if opt.TLSConfig != nil {
		opt.Dialer = tlsDialer(opt.TLSConfig, timeout)
	}
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = timeout, timeout, timeout
	// Honour each call's context deadline on the socket too, so a script
	// timeout (Config.Timeout, shaping's RedisTimeout) really bounds a
	// call to a Redis that stopped answering.
	opt.ContextTimeoutEnabled = true
	// One retry, not three with backoff: with Redis away, callers (the
	// HTTP API, the CLI) hear about it in about a timeout, not seconds.
	opt.MaxRetries = 1
	// One dial attempt per try, not five: a Redis that accepts TCP but
	// never answers would hold each call (and a shutdown waiting on
	// one) for 2×5 dial timeouts.
	opt.DialerRetries = 1
	c := redis.NewClient(opt)
	return c, func() { c.Close() }, nil
}

// reloadOnNetError makes a cluster client re-read the slot map as soon as a
// node cannot be reached. go-redis re-reads it only on MOVED/ASK or every
// ClusterStateReloadInterval (60s), and a dead master answers nothing: after
// a failover, commands for its slots would keep going to the dead address
// for up to a minute although its replica took over in seconds.
// ReloadState is lazy and coalesced, so a burst of errors costs one
// CLUSTER SLOTS.
type reloadOnNetError struct{ c *redis.ClusterClient }

func (h reloadOnNetError) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h reloadOnNetError) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.check(err)
		return err
	}
}

func (h reloadOnNetError) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.check(err)
		return err
	}
}

func (h reloadOnNetError) check(err error) {
	var ne net.Error
	if err != nil && (errors.As(err, &ne) || errors.Is(err, io.EOF)) {
		h.c.ReloadState(context.Background())
	}
}

// redactErr keeps a URL's password out of an error message.
func redactErr(err error, url string) string {
	if url == "" {
		return err.Error()
	}
	return strings.ReplaceAll(err.Error(), url, "<redis url>")
}
