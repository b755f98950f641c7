// Package enqueuecli is the enqueue command: it puts tasks into shaper's
// downstream queues through the same admission limiters as the HTTP API
// and Go producers, one task from flags or many from JSON Lines.
// docs/enqueue.md is the user's reference; cmd/enqueue is a thin main.
package enqueuecli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/shaper-io/shaper/internal/cliflags"
	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/duration"
	"github.com/shaper-io/shaper/internal/redisconn"
	"github.com/shaper-io/shaper/internal/taskspec"
	"github.com/shaper-io/shaper/limiters"
)

// Exit codes. When several apply, the first in this order wins:
// ExitInterrupted, ExitRedis, ExitBadInput, ExitFailed, ExitRejected.
const (
	// ExitOK: every task was enqueued, to run now or (deferred by
	// admission, or by at/in) later, or collapsed into a waiting task
	// with its collapse key.
	ExitOK = 0
	// ExitRejected: admission rejected at least one task, or one was
	// refused as late (its predicted start past its deadline, on_late:
	// reject); the others were enqueued. The summary's first_retry_after
	// says when to try again after a rejection.
	ExitRejected = 1
	// ExitBadInput: a usage or config error (nothing was read), or at least
	// one bad task (each reported on one line of stderr; nothing was
	// enqueued for it; the other tasks went ahead).
	ExitBadInput = 2
	// ExitRedis: Redis was unreachable, at the start (nothing was read) or
	// during the run (the run stopped at the summary's stopped_at_line),
	// including admission failing closed.
	ExitRedis = 3
	// ExitFailed: a task could not be enqueued for another reason: its
	// unique key is taken (unless --skip-duplicates), or the enqueue
	// failed (or its outcome is unknown: uncertain) while Redis answered.
	ExitFailed = 4
	// ExitInterrupted: SIGINT or SIGTERM; the summary is still printed.
	ExitInterrupted = 130
)

// IO is the command's environment.
type IO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// StdinTTY and StderrTTY report terminals: a progress bar is drawn
	// only on a terminal.
	StdinTTY, StderrTTY bool
}

// Stdio is the process's standard streams.
func Stdio() IO {
	return IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		StdinTTY: isTerminal(os.Stdin), StderrTTY: isTerminal(os.Stderr)}
}

// isTerminal reports whether f is a character device (a terminal; also
// /dev/null, where a progress bar is harmless).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0 && os.Getenv("TERM") != "dumb"
}

// options are the parsed flags.
type options struct {
	configPath   string
	redisURL     string
	prefix       string
	redisTimeout time.Duration

	file        string
	payload     string
	payloadSet  bool
	payloadFile string
	unique      string
	defaults    taskspec.Spec

	rate           limiters.Limit
	concurrency    int
	json           bool
	progress       string
	rejects        string
	dryRun         bool
	verbose, quiet bool
	skipDuplicates bool
}

func (o *options) single() bool { return o.payloadSet || o.payloadFile != "" }

const usageText = `Usage:
  enqueue --config shaper.yaml --downstream NAME --payload JSON [flags]   one task
  enqueue --config shaper.yaml [--downstream NAME] < tasks.jsonl          many tasks
  enqueue --redis redis://host:6379 --downstream NAME --file tasks.jsonl  without a config
  enqueue --version                                                       the version and the commit it was built from

enqueue puts tasks into shaper's downstream queues through the downstream's
admission limiters. One task comes from --payload or --payload-file; without
them, tasks come as JSON Lines from --file or stdin, one object a line:

  {"downstream":"api","payload":{"id":1},"key":"tenant-7","cost":1,"unique":"job-1",
   "at":"2026-01-02T15:04:05Z" | "in":"30s","type":"charge","max_retry":3,"priority":2,
   "timeout":"10s","deadline":"2026-01-02T15:09:05Z" | "ttl":"5m","collapse_key":"sync-7"}

Flags set defaults for the fields a line leaves out (not --unique).

Exit codes: 0 all enqueued (accepted or deferred) or collapsed into a
waiting task, 1 some rejected by admission or refused as late (on_late:
reject), 2 bad input (usage, config, or bad tasks: each named on one line
of stderr, nothing enqueued for it), 3 Redis unreachable (the run stops),
4 other enqueue failures (e.g. a duplicate --unique key), 130 interrupted.

Flags:
`

// parseFlags reads args. A usage error is returned as one line.
func parseFlags(args []string, stdout io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("enqueue", flag.ContinueOnError)
	tf := o.define(fs)
	if err := cliflags.Parse(fs, args, stdout, usageText); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, errors.New(oneLine(err.Error()))
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (flags only; see enqueue -h)", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	o.payloadSet = set["payload"]
	for _, f := range tf.fields(&o.defaults, set) {
		if !set[f.name] {
			continue
		}
		if err := f.apply(); err != nil {
			return nil, err
		}
	}
	if set["rate"] {
		l, err := cliflags.ParseRate(tf.rate)
		if err != nil {
			return nil, fmt.Errorf("--rate: %v", err)
		}
		o.rate = l
	}
	if err := o.check(set); err != nil {
		return nil, err
	}
	return o, nil
}

// taskFlags are the flags that set defaults for the fields of a task. Each
// counts only when given: a default of zero is not "cost 0".
type taskFlags struct {
	downstream, key, typ, at, in, rate string
	deadline, collapseKey              string
	ttl                                time.Duration
	cost                               int64
	maxRetry                           int
	priority                           int
	taskTimeout                        time.Duration
}

// define defines every flag on fs: the options' own in o, the tasks'
// defaults in the returned taskFlags.
func (o *options) define(fs *flag.FlagSet) *taskFlags {
	tf := &taskFlags{}
	fs.StringVar(&o.configPath, "config", "", "the shaper config file (redis, downstreams, admission)")
	fs.StringVar(&o.redisURL, "redis", "", "redis:// or rediss:// URL; overrides the config's redis (without --config: no admission)")
	fs.StringVar(&o.prefix, "prefix", "", "key prefix; overrides the config's redis.prefix (default shaper)")
	fs.Var(durationValue{&o.redisTimeout}, "redis-timeout", "bound each Redis call by this `duration` (default: the config's redis.timeout, or 2s)")
	fs.StringVar(&o.file, "file", "", "read JSON Lines tasks from this file (- or no flag: stdin)")
	fs.StringVar(&o.payload, "payload", "", "enqueue one task with this payload (its bytes as given)")
	fs.StringVar(&o.payloadFile, "payload-file", "", "enqueue one task with this file's bytes as payload (- for stdin)")
	fs.StringVar(&o.unique, "unique", "", "unique key for the one task: a second task with it is refused while the first exists")
	fs.StringVar(&tf.downstream, "downstream", "", "the downstream; for JSON Lines, the default for lines without one")
	fs.StringVar(&tf.key, "key", "", "admission key (tenant, user, API key)")
	fs.StringVar(&tf.collapseKey, "collapse-key", "", "collapse key: on a downstream with collapse, a task with it collapses into a waiting task with the same key")
	fs.Int64Var(&tf.cost, "cost", 0, "units the task takes in limiters and in the downstream's bucket (default 1)")
	fs.StringVar(&tf.at, "at", "", "run no earlier than this time (RFC 3339, e.g. 2026-01-02T15:04:05Z, or Unix seconds)")
	fs.StringVar(&tf.in, "in", "", "run no earlier than this long from now (e.g. 30s, 5m)")
	fs.StringVar(&tf.typ, "type", "", "asynq task type (default shaper:task)")
	fs.IntVar(&tf.maxRetry, "max-retry", 0, "handler-failure retry budget (default: the downstream's max_retry)")
	fs.IntVar(&tf.priority, "priority", 0, "priority from 1 (taken first) to 5 (taken last); 0 or unset: the downstream's priority.default, else 3")
	fs.Var(durationValue{&tf.taskTimeout}, "task-timeout", "bound one delivery attempt by this `duration` (default asynq's 30m)")
	fs.StringVar(&tf.deadline, "deadline", "", "start no later than this time or be archived unsent (RFC 3339 or Unix seconds)")
	fs.Var(durationValue{&tf.ttl}, "ttl", "start within this `duration` from enqueue (e.g. 5m, 1d) or be archived unsent")
	fs.StringVar(&tf.rate, "rate", "", "pace enqueues to this rate, e.g. 100/s, 5000/m, or a number per second")
	fs.IntVar(&o.concurrency, "concurrency", 1, "enqueues in flight at once (1 keeps the input's order)")
	fs.BoolVar(&o.json, "json", false, "print a JSON summary on stdout")
	fs.StringVar(&o.progress, "progress", "auto", "progress bar on stderr: auto (on a terminal), always, never")
	fs.StringVar(&o.rejects, "rejects", "", "write the lines admission rejected to this file, to retry them later")
	fs.BoolVar(&o.dryRun, "dry-run", false, "check the input and config; enqueue nothing, contact no Redis")
	fs.BoolVar(&o.verbose, "v", false, "one line on stderr per task")
	fs.BoolVar(&o.quiet, "q", false, "no summary line on stderr (errors still go there)")
	fs.BoolVar(&o.skipDuplicates, "skip-duplicates", false, "a task whose unique key is taken counts as done, not as a failure")
	return tf
}

// taskField checks a given task flag and sets its default in the Spec.
type taskField struct {
	name  string
	apply func() error
}

// fields are the task flags in the order they are checked (the first bad
// one is the error), each setting its field of d.
func (tf *taskFlags) fields(d *taskspec.Spec, set map[string]bool) []taskField {
	return []taskField{
		{"downstream", func() error { d.Downstream = &tf.downstream; return nil }},
		{"key", func() error { d.Key = &tf.key; return nil }},
		{"type", func() error { d.Type = &tf.typ; return nil }},
		{"collapse-key", func() error {
			if msg := taskspec.CheckCollapseKey(tf.collapseKey); msg != "" {
				return fmt.Errorf("--collapse-key %s", msg)
			}
			d.CollapseKey = &tf.collapseKey
			return nil
		}},
		{"cost", func() error {
			d.Cost = &tf.cost
			return inRange("cost", tf.cost, 0)
		}},
		{"max-retry", func() error {
			d.MaxRetry = &tf.maxRetry
			return inRange("max-retry", int64(tf.maxRetry), taskspec.MaxRetryBound)
		}},
		{"priority", func() error {
			if tf.priority == 0 {
				return nil // not set: each line's own, else the downstream's default
			}
			if msg := taskspec.OutOfPriority(tf.priority); msg != "" {
				return fmt.Errorf("--priority %s", msg)
			}
			d.Priority = &tf.priority
			return nil
		}},
		{"task-timeout", func() error {
			if tf.taskTimeout <= 0 {
				return fmt.Errorf("--task-timeout must be positive, got %s", tf.taskTimeout)
			}
			d.Timeout = &tf.taskTimeout
			return nil
		}},
		{"at", func() error {
			if set["in"] {
				return errors.New("set --at or --in, not both")
			}
			t, err := taskspec.ParseAt(tf.at)
			if err != nil {
				return fmt.Errorf("--at: %v", err)
			}
			d.At = &t
			return nil
		}},
		{"deadline", func() error {
			if set["ttl"] {
				return errors.New("set --deadline or --ttl, not both")
			}
			t, err := taskspec.ParseAt(tf.deadline)
			if err != nil {
				return fmt.Errorf("--deadline: %v", err)
			}
			d.Deadline = &t
			return nil
		}},
		{"ttl", func() error {
			if tf.ttl <= 0 {
				return fmt.Errorf("--ttl must be positive, got %s", tf.ttl)
			}
			d.TTL = &tf.ttl
			return nil
		}},
		{"in", func() error {
			v, err := taskspec.ParseDuration(tf.in)
			if err != nil {
				return fmt.Errorf("--in: %v", err)
			}
			if v < 0 {
				return fmt.Errorf("--in must not be negative, got %s", v)
			}
			d.In = &v
			return nil
		}},
	}
}

// inRange refuses an integer flag outside 0..hi (hi 0: no upper bound),
// in the words the JSON Lines fields use.
func inRange(flag string, n, hi int64) error {
	if msg := taskspec.OutOfRange(n, hi); msg != "" {
		return fmt.Errorf("--%s %s", flag, msg)
	}
	return nil
}

// check refuses flags that do not go together or are out of range.
func (o *options) check(set map[string]bool) error {
	switch {
	case o.payloadSet && o.payloadFile != "":
		return errors.New("set --payload or --payload-file, not both")
	case o.single() && o.file != "":
		return errors.New("--file reads many tasks; --payload and --payload-file give one: use one way")
	case !o.single() && set["unique"]:
		return errors.New("--unique is for one task (--payload or --payload-file); in JSON Lines, set \"unique\" per line")
	case set["unique"] && o.unique == "":
		return errors.New("--unique must not be empty")
	case o.single() && o.rejects != "":
		return errors.New("--rejects is for JSON Lines input")
	case o.concurrency < 1 || o.concurrency > 256:
		return fmt.Errorf("--concurrency must be 1..256, got %d", o.concurrency)
	case o.progress != "auto" && o.progress != "always" && o.progress != "never":
		return fmt.Errorf("--progress must be auto, always or never, got %q", o.progress)
	case o.verbose && o.quiet:
		return errors.New("set -v or -q, not both")
	case o.configPath == "" && o.redisURL == "" && !o.dryRun:
		return errors.New("set --config (the shaper config file) or --redis (a redis:// URL)")
	case set["redis-timeout"] && o.redisTimeout <= 0:
		return fmt.Errorf("--redis-timeout must be positive, got %s", o.redisTimeout)
	}
	return nil
}

// durationValue is a duration flag read as every shaper setting reads one
// (duration.Parse: "30s", "5m", "1d"), with an error that says so.
type durationValue struct{ d *time.Duration }

func (v durationValue) String() string {
	if v.d == nil || *v.d == 0 {
		return ""
	}
	return v.d.String()
}

func (v durationValue) Set(s string) error {
	d, err := duration.Parse(s)
	if err != nil {
		return errors.New("want a duration such as 30s, 5m, 1h30m or 1d")
	}
	*v.d = d
	return nil
}

func oneLine(s string) string { return taskspec.OneLine(s) }

// Main runs the command with args (without the program name) and returns
// the exit code.
func Main(ctx context.Context, args []string, std IO) int {
	con := newConsole(std.Stderr)
	// go-redis logs failed dials on its own; the errors reach the user
	// through this command's one-line messages instead.
	redisconn.Quiet()
	// The words shaper takes too: "enqueue help", and the version alone
	// (not a flag: it goes with no other).
	if len(args) == 1 {
		switch args[0] {
		case "help":
			args = []string{"-h"}
		case "version", "-version", "--version":
			fmt.Fprintln(std.Stdout, Version())
			return ExitOK
		}
	}
	o, err := parseFlags(args, std.Stdout)
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err != nil {
		con.line("enqueue: %s", err)
		return ExitBadInput
	}
	r, serr := setup(o, std, con)
	if serr != nil {
		con.line("enqueue: %s", serr.msg)
		if o.json {
			writeJSON(std.Stdout, Summary{Error: serr.msg, ExitCode: serr.code, DryRun: o.dryRun})
		}
		return serr.code
	}
	defer r.close()
	return r.run(ctx)
}

// loadConfig reads the config file, or makes one from --redis, with the
// flags' overrides applied.
func loadConfig(o *options) (*config.Config, error) {
	cfg := &config.Config{Redis: config.Redis{Prefix: "shaper", Timeout: config.Duration(config.DefaultRedisTimeout)}}
	if o.configPath != "" {
		c, err := config.Load(o.configPath)
		if err != nil {
			return nil, err
		}
		cfg = c
	}
	if o.redisURL != "" {
		if !strings.HasPrefix(o.redisURL, "redis://") && !strings.HasPrefix(o.redisURL, "rediss://") && !strings.HasPrefix(o.redisURL, "unix://") {
			return nil, fmt.Errorf("--redis: want a redis://, rediss:// or unix:// URL, got %q", redact(o.redisURL))
		}
		cfg.Redis.URL, cfg.Redis.Cluster, cfg.Redis.Sentinel = o.redisURL, nil, nil
	}
	if o.prefix != "" {
		cfg.Redis.Prefix = o.prefix
	}
	if o.redisTimeout > 0 {
		cfg.Redis.Timeout = config.Duration(o.redisTimeout)
	}
	if cfg.Redis.Timeout <= 0 {
		cfg.Redis.Timeout = config.Duration(config.DefaultRedisTimeout)
	}
	return cfg, nil
}

// redact hides a URL's password: redis://user:secret@host → redis://user:xxxxx@host.
func redact(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	userinfo, host, ok := strings.Cut(rest, "@")
	if !ok {
		return u
	}
	if user, _, hasPw := strings.Cut(userinfo, ":"); hasPw {
		return scheme + "://" + user + ":xxxxx@" + host
	}
	return u
}
