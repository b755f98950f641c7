package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/testsink"
)

// env is what every scenario shares: one throwaway redis-server owned by
// the run, a client with room for 64 concurrent callers, and the progress
// log.
type env struct {
	opts Options
	srv  *redistest.Server
	addr string
	rdb  *redis.Client
	tmp  string
	seq  int // run counter, for unique key prefixes
	// shaperBin is the shaper binary the fidelity runs start.
	shaperBin string
}

func newEnv(ctx context.Context, opts Options) (*env, error) {
	srv, err := redistest.Start()
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	tmp, err := os.MkdirTemp("", "shaperbench-")
	if err != nil {
		srv.Stop()
		srv.Cleanup()
		return nil, err
	}
	e := &env{opts: opts, srv: srv, addr: srv.Addr, tmp: tmp,
		rdb: redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64, ContextTimeoutEnabled: true})}
	if err := e.rdb.Ping(ctx).Err(); err != nil {
		e.close()
		return nil, fmt.Errorf("bench: redis at %s: %w", srv.Addr, err)
	}
	return e, nil
}

func (e *env) close() {
	e.rdb.Close()
	e.srv.Stop()
	e.srv.Cleanup()
	os.RemoveAll(e.tmp)
}

func (e *env) logf(format string, args ...any) {
	if e.opts.Progress != nil {
		fmt.Fprintf(e.opts.Progress, "shaperbench: "+format+"\n", args...)
	}
}

// prefix returns a key prefix (and asynq queue stem) unique to one run.
func (e *env) prefix(what string) string {
	e.seq++
	return fmt.Sprintf("bench%d-%s", e.seq, what)
}

// flush empties the run's Redis between scenarios that measure memory.
func (e *env) flush(ctx context.Context) error {
	return e.rdb.FlushAll(ctx).Err()
}

// infoInt reads one integer field of INFO section.
func (e *env) infoInt(ctx context.Context, section, field string) (int64, error) {
	s, err := e.rdb.Info(ctx, section).Result()
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if ok && k == field {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("bench: INFO %s has no %s", section, field)
}

func (e *env) commandsProcessed(ctx context.Context) int64 {
	n, _ := e.infoInt(ctx, "stats", "total_commands_processed")
	return n
}

// Machine describes where a run happened.
type Machine struct {
	NumCPU         int    `json:"nproc"`
	CPU            string `json:"cpu"`
	GoVersion      string `json:"go_version"`
	RedisVersion   string `json:"redis_server_version"`
	RedisBenchmark string `json:"redis_benchmark"` // path, or why it is missing
	LoadStart      string `json:"loadavg_start"`
	LoadEnd        string `json:"loadavg_end"`
}

func machine() Machine {
	m := Machine{NumCPU: runtime.NumCPU(), GoVersion: runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH,
		LoadStart: loadavg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if out, err := exec.Command("redis-server", "--version").Output(); err == nil {
		m.RedisVersion = strings.TrimSpace(string(out))
	}
	if p, err := exec.LookPath("redis-benchmark"); err == nil {
		m.RedisBenchmark = p
	} else {
		m.RedisBenchmark = "not found on PATH (apt-get install redis-tools); the EVALSHA ceiling column is empty"
	}
	return m
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// buildShaper builds cmd/shaper into the run's temp directory.
func (e *env) buildShaper(ctx context.Context) (string, error) {
	if e.opts.ShaperBin != "" {
		return e.opts.ShaperBin, nil
	}
	bin := filepath.Join(e.tmp, "shaper")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/shaper-io/shaper/cmd/shaper")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("bench: go build cmd/shaper: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return bin, nil
}

// syncBuffer keeps the last 8 KiB written to it (a child's stderr). Safe
// for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	if len(s.b) > 8192 {
		s.b = append([]byte(nil), s.b[len(s.b)-8192:]...)
	}
	return len(p), nil
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.b)
}

var _ io.Writer = (*syncBuffer)(nil)

// awaitDelivered waits until sink has every one of n tasks (distinct ids),
// ctx ends or limit has passed since start; an error says how many came.
func awaitDelivered(ctx context.Context, sink *testsink.Sink, n int, start time.Time, limit time.Duration) error {
	if pollUntil(ctx, start.Add(limit), 20*time.Millisecond, func() bool { return sink.DistinctOK() >= n }) {
		return nil
	}
	return fmt.Errorf("%d of %d delivered in %s", sink.DistinctOK(), n, limit)
}

// stopInto stops the processes (a nil stop: none started) and keeps the
// first error in *err.
func stopInto(ctx context.Context, stop func(context.Context) error, err *error) {
	if stop == nil {
		return
	}
	if serr := stop(ctx); serr != nil && *err == nil {
		*err = serr
	}
}

// pollUntil calls cond every interval until it is true, ctx ends or the
// deadline passes; it reports whether cond became true.
func pollUntil(ctx context.Context, deadline time.Time, interval time.Duration, cond func() bool) bool {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return cond()
		case <-t.C:
		}
	}
}
