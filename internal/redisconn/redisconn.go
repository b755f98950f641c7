// Package redisconn opens the Redis a config names: a URL (redis:// or
// rediss://), a Cluster or a Sentinel group. It is what the producer side
// (the enqueue CLI) and the daemon share; the daemon's embedded Redis and
// its start-up checks stay in internal/app, so a producer links neither.
// internal/plan derives its Options from the config's redis section.
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
)

// ErrEmbedded is returned by Open for options that name no Redis (no
// URL, Cluster or Sentinel): only the daemon can start the embedded one.
var ErrEmbedded = errors.New("redisconn: the config names no Redis (redis.url, redis.cluster or redis.sentinel)")

// Options says how to reach Redis. The zero value names none (Embedded).
type Options struct {
	// URL is redis://[user@]host[:port][/db] or rediss://…, without a
	// password.
	URL string
	// Cluster lists Redis Cluster seed addresses (host:port).
	Cluster []string
	// SentinelMaster and SentinelAddrs select a master through Redis
	// Sentinel, when SentinelAddrs is set.
	SentinelMaster string
	SentinelAddrs  []string
	// Username is the ACL user, if any.
	Username string
	// Password reads the password when Open connects; nil means none.
	Password func() (string, error)
	// TLSCAFile is a PEM CA bundle for a rediss:// URL.
	TLSCAFile string
	// Timeout bounds dialing and each read and write; zero means
	// go-redis's defaults.
	Timeout time.Duration
	// Desc describes these options in logs and errors, without any
	// secret (String).
	Desc string
}

// Embedded reports whether o names no Redis: the daemon then starts its
// embedded one.
func (o Options) Embedded() bool {
	return o.URL == "" && len(o.Cluster) == 0 && len(o.SentinelAddrs) == 0
}

// String is Desc.
func (o Options) String() string { return o.Desc }

// Open connects as o says. The returned close func closes the client.
// Options that name no Redis return ErrEmbedded.
func Open(o Options) (redis.UniversalClient, func(), error) {
	if o.Embedded() {
		return nil, nil, ErrEmbedded
	}
	password := ""
	if o.Password != nil {
		var err error
		if password, err = o.Password(); err != nil {
			return nil, nil, err
		}
	}
	timeout := o.Timeout
	tlsCfg, err := caConfig(o.TLSCAFile)
	if err != nil {
		return nil, nil, err
	}
	var dialer func(ctx context.Context, network, addr string) (net.Conn, error)
	if tlsCfg != nil {
		dialer = tlsDialer(tlsCfg, timeout)
	}
	switch {
	case len(o.Cluster) > 0:
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: o.Cluster, Username: o.Username, Password: password,
			TLSConfig: tlsCfg, Dialer: dialer, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, ContextTimeoutEnabled: true,
			MaxIdleConns: maxIdleConns})
		c.AddHook(reloadOnNetError{c})
		return c, func() { c.Close() }, nil
	case len(o.SentinelAddrs) > 0:
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: o.SentinelMaster, SentinelAddrs: o.SentinelAddrs,
			Username: o.Username, Password: password, TLSConfig: tlsCfg, Dialer: dialer, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
			ContextTimeoutEnabled: true, MaxRetries: 1, MaxIdleConns: maxIdleConns})
		return c, func() { c.Close() }, nil
	}
	return openURL(o, password, tlsCfg, timeout)
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

// maxIdleConns is how many connections a client keeps open between
// calls (per node on a cluster): an idle shaper process makes a few calls
// at a time (the take loop's workers, the control and liveness loops), and
// a burst beyond that closes its extra connections once done, so an idle
// fleet holds a few connections per process, whatever its downstreams.
const maxIdleConns = 8

func openURL(cfg Options, password string, tlsCfg *tls.Config, timeout time.Duration) (redis.UniversalClient, func(), error) {
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
	opt.MaxIdleConns = maxIdleConns
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
