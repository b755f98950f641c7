package bench

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/redistest"
)

// procFleet is P real `shaper` processes started from one config, as a
// user runs them, with what the release-path rounds read off each one.
type procFleet struct {
	*shaperFleet
	watch []*logWatch
	pids  []int
}

// logWatch is a shaper process's stderr: it keeps the tail (for errors)
// and notes, as the lines are written, when the process logged "shaper
// started" (it is serving: dispatcher started, HTTP up) and its HTTP
// address and worker count. The tail alone would lose the start line
// under 500 "downstream" lines. Safe for concurrent use.
type logWatch struct {
	tail    syncBuffer
	started time.Time // when the process was started

	mu      sync.Mutex
	partial []byte
	ready   time.Time // when "shaper started" was written
	addr    string
	workers int // of the first downstream
}

var (
	startedRE = regexp.MustCompile(`"msg":"shaper started".*"http":"([^"]*)"`)
	workersRE = regexp.MustCompile(`"msg":"downstream".*"workers":(\d+)`)
)

func (w *logWatch) Write(p []byte) (int, error) {
	now := time.Now()
	w.tail.Write(p)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		line := w.partial[:i]
		if m := startedRE.FindSubmatch(line); m != nil && w.ready.IsZero() {
			w.ready, w.addr = now, string(m[1])
		}
		if m := workersRE.FindSubmatch(line); m != nil && w.workers == 0 {
			w.workers, _ = strconv.Atoi(string(m[1]))
		}
		w.partial = w.partial[i+1:]
	}
	return len(p), nil
}

// state returns the time from start to "shaper started" (0 until then),
// the HTTP address and the worker count.
func (w *logWatch) state() (time.Duration, string, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ready.IsZero() {
		return 0, "", w.workers
	}
	return w.ready.Sub(w.started), w.addr, w.workers
}

// shaperYAML is a whole shaper config on the run's Redis: HTTP on a free
// port (the log says which), a 5 s shutdown, then body (the downstreams
// list).
func (e *env) shaperYAML(prefix, body string) string {
	return fmt.Sprintf("redis: {url: \"redis://%s\", prefix: %q}\nhttp: {listen: \"127.0.0.1:0\"}\nshutdown_timeout: 5s\ndownstreams:\n%s",
		e.addr, prefix, body)
}

// httpDownstream is one downstream line: rate/s to the sink; workers 0
// leaves the default (as max_wait always is); extra are more fields
// ("fairness: {key: tenant}").
func httpDownstream(name string, rate, workers int, sinkURL string, extra ...string) string {
	w := ""
	if workers > 0 {
		w = fmt.Sprintf(", workers: %d", workers)
	}
	for _, x := range extra {
		w += ", " + x
	}
	return fmt.Sprintf("  - {name: %s, rate: %d/s%s, handler: {type: http, url: %q, timeout: 5s}}\n", name, rate, w, sinkURL)
}

// launch starts p shaper processes from one config and waits until each
// logged "shaper started" (or limit passes).
func (e *env) launch(ctx context.Context, prefix string, p int, cfg string, limit time.Duration) (*procFleet, error) {
	if e.shaperBin == "" {
		bin, err := e.buildShaper(ctx)
		if err != nil {
			return nil, err
		}
		e.shaperBin = bin
	}
	path := filepath.Join(e.tmp, prefix+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	f := &procFleet{shaperFleet: &shaperFleet{}}
	for i := 0; i < p; i++ {
		w := &logWatch{started: time.Now()}
		cmd, err := f.spawn(e.shaperBin, path, w, &w.tail)
		if err != nil {
			f.stop(ctx)
			return nil, err
		}
		f.watch, f.pids = append(f.watch, w), append(f.pids, cmd.Process.Pid)
	}
	deadline := time.Now().Add(limit)
	for i, w := range f.watch {
		var exited error
		ok := pollUntil(ctx, deadline, 10*time.Millisecond, func() bool {
			select {
			case err := <-f.done[i]:
				exited = fmt.Errorf("exited (%v)", err)
				f.done[i] <- err // stop() reads it again
				return true
			default:
			}
			// The downstream lines (with the worker count) follow the
			// start line; every config here has at least one.
			d, _, workers := w.state()
			return d > 0 && workers > 0
		})
		if !ok || exited != nil {
			if exited == nil {
				exited = fmt.Errorf("not serving within %s", limit)
			}
			err := fmt.Errorf("bench: shaper process %d %w; stderr tail: %s", i, exited, tail(w.tail.String(), 400))
			f.stop(ctx)
			return nil, err
		}
		_, addr, _ := w.state()
		f.metrics = append(f.metrics, "http://"+addr+"/metrics")
	}
	return f, nil
}

// kill sends SIGKILL to process i, reaps it and forgets it, so stop()
// handles only the living.
func (f *procFleet) kill(i int) error {
	if err := f.procs[i].Process.Kill(); err != nil {
		return err
	}
	<-f.done[i]
	drop := func(s []string) []string {
		if i < len(s) {
			return append(s[:i:i], s[i+1:]...)
		}
		return s
	}
	f.procs = append(f.procs[:i:i], f.procs[i+1:]...)
	f.done = append(f.done[:i:i], f.done[i+1:]...)
	f.stderr = append(f.stderr[:i:i], f.stderr[i+1:]...)
	f.watch = append(f.watch[:i:i], f.watch[i+1:]...)
	f.pids = append(f.pids[:i:i], f.pids[i+1:]...)
	f.metrics = drop(f.metrics)
	return nil
}

// workers is the worker count per downstream the first process logged.
func (f *procFleet) workers() int {
	if len(f.watch) == 0 {
		return 0
	}
	_, _, w := f.watch[0].state()
	return w
}

// rssKB reads VmRSS of pid from /proc (0 if it cannot).
func rssKB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// commandStats reads INFO commandstats of the run's Redis.
func (e *env) commandStats(ctx context.Context) (redistest.CommandStats, error) {
	return redistest.ReadCommandStats(ctx, e.rdb)
}

// countCommands returns the Redis commands (scripts' own commands
// included) that ran while f ran, less the INFO that read the first count.
func (e *env) countCommands(ctx context.Context, f func() error) (redistest.CommandStats, error) {
	before, err := e.commandStats(ctx)
	if err != nil {
		return nil, err
	}
	ferr := f()
	after, err := e.commandStats(ctx)
	if err != nil {
		return nil, err
	}
	d := after.Sub(before)
	if d["info"]--; d["info"] == 0 {
		delete(d, "info")
	}
	return d, ferr
}

// scripts is the script calls in s (EVALSHA and the EVAL fallback).
// RedisWork is a run's Redis work: the INFO commandstats delta over the
// run (start-up, enqueues, releases), its script calls, its top commands,
// and each per task delivered.
type RedisWork struct {
	Commands       int64   `json:"redis_commands"`
	Scripts        int64   `json:"scripts"`
	CmdsPerTask    float64 `json:"commands_per_task"`
	ScriptsPerTask float64 `json:"scripts_per_task"`
	Top            string  `json:"top_commands"`
}

// redisWork is d's RedisWork for delivered tasks (no per-task figures
// when none was delivered).
func redisWork(d redistest.CommandStats, delivered int) RedisWork {
	w := RedisWork{Commands: d.Total(), Scripts: scripts(d), Top: topCommands(d, 8)}
	if delivered > 0 {
		w.CmdsPerTask = round(float64(w.Commands)/float64(delivered), 1)
		w.ScriptsPerTask = round(float64(w.Scripts)/float64(delivered), 2)
	}
	return w
}

func scripts(s redistest.CommandStats) int64 {
	return s["evalsha"] + s["eval"] + s["evalsha_ro"] + s["eval_ro"]
}

// topCommands lists the n most called commands of s, "name=count".
func topCommands(s redistest.CommandStats, n int) string {
	type kv struct {
		k string
		v int64
	}
	var all []kv
	for k, v := range s {
		all = append(all, kv{k, v})
	}
	// Most calls first, ties by name, so the JSON is stable.
	slices.SortFunc(all, func(a, b kv) int { return cmp.Or(cmp.Compare(b.v, a.v), cmp.Compare(a.k, b.k)) })
	var parts []string
	for i := 0; i < len(all) && i < n; i++ {
		parts = append(parts, fmt.Sprintf("%s=%d", all[i].k, all[i].v))
	}
	return strings.Join(parts, " ")
}

// startRawAsynq starts p asynq servers × workers on queue q, asynq's
// defaults otherwise (1 s TaskCheckInterval), each POSTing to sinkURL with
// the same HTTP code shaper uses: raw asynq as a user runs it.
func (e *env) startRawAsynq(q string, p, workers int, sinkURL string) (*asynqFleet, error) {
	f := &asynqFleet{}
	for i := 0; i < p; i++ {
		rdb := redis.NewClient(&redis.Options{Addr: e.addr, ContextTimeoutEnabled: true})
		f.rdbs = append(f.rdbs, rdb)
		cfg := e.asynqConfig(q)
		cfg.Concurrency, cfg.TaskCheckInterval, cfg.DelayedTaskCheckInterval = workers, 0, 0
		srv := asynq.NewServerFromRedisClient(rdb, cfg)
		if err := srv.Start(asynq.HandlerFunc(deliverer(sinkURL))); err != nil {
			f.stop(context.Background())
			return nil, err
		}
		f.srvs = append(f.srvs, srv)
	}
	return f, nil
}
