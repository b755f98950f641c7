package app

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

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/config"
)

// OpenRedis connects as cfg says: a URL (redis:// or rediss://), a Cluster,
// a Sentinel group, or, when none is set, an embedded in-process Redis (for
// trying shaper out on one machine; its state dies with the process). The
// returned close func closes the client and the embedded server.
func OpenRedis(cfg config.Redis) (redis.UniversalClient, func(), error) {
	password, err := cfg.Password()
	if err != nil {
		return nil, nil, err
	}
	timeout := time.Duration(cfg.Timeout)
	var tlsCfg *tls.Config
	if cfg.TLSCAFile != "" {
		pem, err := os.ReadFile(cfg.TLSCAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("config: redis.tls_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("config: redis.tls_ca_file: no PEM certificate in %s", cfg.TLSCAFile)
		}
		tlsCfg = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
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
	case cfg.URL != "":
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
	addr, stop, err := StartEmbedded()
	if err != nil {
		return nil, nil, err
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	return c, func() { c.Close(); stop() }, nil
}

// StartEmbedded starts an in-process Redis (miniredis) for the quick start
// and single-process trials, and moves its clock forward once a second:
// miniredis expires keys only when its clock moves. Never for tests that
// check correctness: those run on a real redis-server.
func StartEmbedded() (addr string, stop func(), err error) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		return "", nil, fmt.Errorf("embedded redis: %w", err)
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				mr.FastForward(time.Second)
			case <-done:
				return
			}
		}
	}()
	return mr.Addr(), func() { close(done); mr.Close() }, nil
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

// Ping checks Redis within d.
func Ping(rdb redis.UniversalClient, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return rdb.Ping(ctx).Err()
}
