// Package redistest gives tests a real Redis: a throwaway redis-server on a
// free loopback port, started once per test binary, or the server named by
// REDIS_ADDR, or the Redis Cluster named by REDIS_CLUSTER_ADDRS. Each test
// gets its own key prefix, so tests run in parallel on one server.
//
// There is no mock here on purpose: correctness tests trust only a real
// server over TCP.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	once    sync.Once
	addr    string
	cluster []string
	srv     *Server
	initErr error
)

// Main runs the tests of a package, stops the server it started and
// removes its directory, then runs cleanups (a package's own temporary
// files). Call it from TestMain: func TestMain(m *testing.M) {
// redistest.Main(m) }.
func Main(m *testing.M, cleanups ...func()) {
	code := m.Run()
	if srv != nil {
		srv.Stop()
		srv.Cleanup()
	}
	for _, c := range cleanups {
		c() // before os.Exit, which runs no deferred call
	}
	os.Exit(code)
}

func setup() {
	if c := os.Getenv("REDIS_CLUSTER_ADDRS"); c != "" {
		cluster = strings.Split(c, ",")
		return
	}
	if a := os.Getenv("REDIS_ADDR"); a != "" {
		addr = a
		return
	}
	srv, initErr = Start()
	if srv != nil {
		addr = srv.Addr
	}
}

// Cluster reports whether the tests run against a Redis Cluster.
func Cluster() bool {
	once.Do(setup)
	return len(cluster) > 0
}

// Addr is the address of the shared test server (single-node mode).
func Addr(tb testing.TB) string {
	tb.Helper()
	once.Do(setup)
	if initErr != nil {
		tb.Fatalf("redistest: %v", initErr)
	}
	if len(cluster) > 0 {
		return cluster[0]
	}
	return addr
}

// Client returns a client of the shared test Redis (a cluster client when
// REDIS_CLUSTER_ADDRS is set), closed when the test ends.
func Client(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	once.Do(setup)
	if initErr != nil {
		tb.Fatalf("redistest: %v", initErr)
	}
	var c redis.UniversalClient
	if len(cluster) > 0 {
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster, ContextTimeoutEnabled: true})
	} else {
		c = redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// URL is the redis:// URL of the shared test server (single-node mode). A
// test that asks for it talks to one server, so on a cluster
// (REDIS_CLUSTER_ADDRS set) it is skipped rather than pointed at one node.
func URL(tb testing.TB) string {
	tb.Helper()
	if Cluster() {
		tb.Skip("redistest: single-server test (redis:// URL); REDIS_CLUSTER_ADDRS is set")
	}
	return "redis://" + Addr(tb)
}

// TimingOnly skips a test in the cluster pass (REDIS_CLUSTER_ADDRS set)
// whose claim is pure timing (a rate settling, a backoff's spacing, a
// prediction against the wall clock) and whose scripts and keys other
// tests of that pass already run on the cluster: that pass is about key
// slots, CROSSSLOT and the cluster client, and the first pass (-race, one
// server) holds the timing. covered names those other tests, for the skip
// message. Single-server runs are unaffected.
func TimingOnly(tb testing.TB, covered string) {
	tb.Helper()
	if Cluster() {
		tb.Skip("redistest: a timing claim, checked in the single-server pass; its scripts and keys run on the cluster in " + covered)
	}
}

// Addrs are the seed addresses of the test cluster (nil in single-node
// mode).
func Addrs() []string {
	once.Do(setup)
	return append([]string(nil), cluster...)
}

var unsafe = regexp.MustCompile(`[^A-Za-z0-9]+`)

// Prefix returns a key prefix unique to this test run, so tests sharing a
// server never see each other's keys.
func Prefix(tb testing.TB) string {
	tb.Helper()
	var b [4]byte
	rand.Read(b[:])
	name := unsafe.ReplaceAllString(tb.Name(), "_")
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	return "t_" + name + "_" + hex.EncodeToString(b[:])
}

// Server is a redis-server process owned by a test.
type Server struct {
	Addr string
	Port int
	Dir  string
	cmd  *exec.Cmd
	args []string
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start launches redis-server on a free loopback port in a fresh directory,
// with extra arguments appended (e.g. "--appendonly", "yes"), and waits
// until it answers PING.
func Start(extra ...string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found on PATH (install it: apt-get install redis-server) and REDIS_ADDR not set")
	}
	dir, err := os.MkdirTemp("", "shaper-redis-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), Port: port, Dir: dir}
		s.args = append([]string{"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"), "--daemonize", "no"}, extra...)
		s.cmd = exec.Command(bin, s.args...)
		if err := s.cmd.Start(); err != nil {
			return nil, err
		}
		if lastErr = s.waitReady(10 * time.Second); lastErr == nil {
			return s, nil
		}
		s.Stop()
	}
	return nil, fmt.Errorf("redis-server did not start: %w", lastErr)
}

// Own is a client on a throwaway redis-server of the caller's own,
// stopped when the test ends: for counts (INFO, PUBSUB) that nothing else
// may disturb.
func Own(tb testing.TB) *redis.Client {
	tb.Helper()
	srv, err := Start()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { srv.Stop(); srv.Cleanup() })
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	tb.Cleanup(func() { rdb.Close() })
	return rdb
}

func (s *Server) waitReady(d time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		// a server that asks for a password is up
		if err == nil || strings.HasPrefix(err.Error(), "NOAUTH") {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond) // poll interval, bounded by the deadline
	}
}

// Stop kills the server and waits for it to exit.
func (s *Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		s.cmd = nil
	}
}

// Restart stops the server and starts it again on the same port and
// directory (for restart tests; with --appendonly yes the data survives).
func (s *Server) Restart() error {
	s.Stop()
	return s.StartAgain()
}

// StartAgain starts a stopped server on its old port and directory.
func (s *Server) StartAgain() error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return err
	}
	s.cmd = exec.Command(bin, s.args...)
	if err := s.cmd.Start(); err != nil {
		return err
	}
	return s.waitReady(10 * time.Second)
}

// Cleanup removes the server's directory (after Stop).
func (s *Server) Cleanup() { os.RemoveAll(s.Dir) }

// ScanKeys lists the keys matching pattern, on every master of a cluster.
func ScanKeys(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]string, error) {
	var mu sync.Mutex
	var keys []string
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			keys = append(keys, it.Val())
			mu.Unlock()
		}
		return it.Err()
	}
	if err := eachMaster(ctx, rdb, "ScanKeys", scan); err != nil {
		return nil, err
	}
	return keys, nil
}

// eachMaster runs f on every master of a cluster client (concurrently: f
// guards what it shares), or on the one node of a plain client. caller
// names the function in the error for any other client.
func eachMaster(ctx context.Context, rdb redis.UniversalClient, caller string, f func(context.Context, *redis.Client) error) error {
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, f)
	case *redis.Client:
		return f(ctx, c)
	}
	return fmt.Errorf("redistest: %s needs a *redis.Client or *redis.ClusterClient, got %T", caller, rdb)
}
