package config

import (
	"cmp"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/shaper-io/shaper/internal/priority"
	"github.com/shaper-io/shaper/internal/quota"
	"github.com/shaper-io/shaper/internal/sizing"
	"github.com/shaper-io/shaper/limiters"
)

// Config is the whole configuration file. Parse and Load return it with
// every default filled in.
type Config struct {
	Redis Redis `yaml:"redis"`
	HTTP  HTTP  `yaml:"http"`
	// ShutdownTimeout bounds a graceful shutdown. Default 10s.
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
	// Downstreams are the systems shaper protects; at least one.
	Downstreams []Downstream `yaml:"downstreams"`
	// Cron lists periodic producers: tasks enqueued on a schedule.
	Cron []CronJob `yaml:"cron,omitempty"`
}

// Redis says how to reach Redis. At most one of URL, Cluster and Sentinel
// is set; none of them means an embedded in-process Redis (quick start
// only). Redis holds no secret: the password is read when connecting (plan.Secret).
type Redis struct {
	// URL is redis://[user@]host[:port][/db] or rediss://…; it must not
	// contain a password.
	URL string `yaml:"url"`
	// PasswordEnv names the environment variable holding the password.
	PasswordEnv string `yaml:"password_env,omitempty"`
	// PasswordFile is a file holding the password (surrounding white
	// space trimmed). Exclusive with PasswordEnv.
	PasswordFile string `yaml:"password_file,omitempty"`
	// Username is the ACL user, if any.
	Username string `yaml:"username,omitempty"`
	// TLSCAFile is a PEM CA bundle for a rediss:// URL.
	TLSCAFile string `yaml:"tls_ca_file,omitempty"`
	// Cluster lists Redis Cluster seed addresses (host:port).
	Cluster []string `yaml:"cluster,omitempty"`
	// Sentinel selects a master through Redis Sentinel.
	Sentinel *Sentinel `yaml:"sentinel,omitempty"`
	// Prefix starts every key shaper writes. Default "shaper".
	Prefix string `yaml:"prefix"`
	// Timeout bounds each Redis call. Default 2s.
	Timeout Duration `yaml:"timeout"`
}

// Sentinel is a Redis Sentinel setup.
type Sentinel struct {
	Master string   `yaml:"master"`
	Addrs  []string `yaml:"addrs"`
}

// HTTP configures the daemon's HTTP server (enqueue API, control
// endpoints, metrics, status page).
type HTTP struct {
	// Listen is host:port. Default 127.0.0.1:8080; ListenOff disables.
	Listen string `yaml:"listen"`
	// TokenEnv names the environment variable holding the bearer token
	// that the enqueue and control endpoints require. "" means no token.
	TokenEnv string `yaml:"token_env,omitempty"`
	// MaxBody is the largest request body accepted. Default 1MiB, at most
	// MaxMaxBody.
	MaxBody ByteSize `yaml:"max_body"`
	// AllowUnauthenticated lets Listen be an address reachable beyond this
	// host (not loopback) while TokenEnv is empty. Without it that is an
	// error: anyone who reaches the port could enqueue and pause.
	AllowUnauthenticated bool `yaml:"allow_unauthenticated,omitempty"`
	// MetricsKeys serves the per-key series (shaper_fair_key_releases,
	// labelled with a tenant key) on /metrics, to requests with the token
	// when TokenEnv is set. Default false: no series carries a key. It
	// needs TokenEnv when Listen is reachable beyond this host, whatever
	// AllowUnauthenticated says.
	MetricsKeys bool `yaml:"metrics_keys,omitempty"`
}

// Downstream is one protected system: its own queue, shaping bucket and
// worker budget.
type Downstream struct {
	// Name is unique, 1-64 of [A-Za-z0-9_.-]; it names the queue and keys.
	Name string `yaml:"name"`
	// Rate is the release rate in limiters.ParseLimit syntax, e.g. "50/s".
	Rate Rate `yaml:"rate"`
	// Burst is how many releases may go out back to back. Default 1.
	Burst int64 `yaml:"burst"`
	// MaxWait is how long a worker may hold a task waiting for its slot.
	// Default 1s, at most sizing.MaxMaxWait. Exclusive with Capacity, and zero
	// when Capacity is set; use MaxWaitDuration.
	MaxWait Duration `yaml:"max_wait,omitempty"`
	// Capacity is the number of tasks the bucket may hold waiting for a
	// slot, an alternative way to say MaxWait: MaxWait = Capacity / rate
	// (at one instant it grants Capacity waiting slots plus the one that
	// starts now).
	Capacity int64 `yaml:"capacity,omitempty"`
	// MaxCost is the largest cost one task may carry; a task above it is
	// refused at enqueue. Default: what the bucket holds, rate × MaxWait
	// (or Burst), at least 1 (shaping.DefaultMaxCost).
	MaxCost int64 `yaml:"max_cost,omitempty"`
	// MaxHold is the longest one answer of the downstream (an announced
	// reset, a Retry-After, a reported cost) may hold it; a longer one is
	// cut to it. The quotas in Quotas are not cut. Default 1h
	// (DefaultMaxHold), more than 0 and at most 24h; zero in a Config built
	// in code means the default.
	MaxHold Duration `yaml:"max_hold,omitempty"`
	// RateHeaders reads limits the downstream announces in header fields
	// of its own: a vendor profile (`rate_headers: shopify`) or a mapping
	// (`{remaining: X-Left, limit: X-Max, reset: X-Reset, reset_unit:
	// epoch_s}`); nil reads only the standard fields.
	RateHeaders *RateHeaders `yaml:"rate_headers,omitempty"`
	// Concurrency caps the calls in flight across every process; 0 (the
	// default) means no cap.
	Concurrency int `yaml:"concurrency,omitempty"`
	// KeyConcurrency caps the calls in flight per admission key across
	// every process; 0 (the default) means no cap.
	KeyConcurrency int `yaml:"key_concurrency,omitempty"`
	// Lease is how long a call's concurrency lease lives unless renewed
	// (a crashed process's places are free within it). Default 10s; only
	// with Concurrency or KeyConcurrency.
	Lease Duration `yaml:"lease,omitempty"`
	// Fairness, when set, shares the rate among the task keys with tasks
	// waiting (weighted fair share) instead of first come, first served.
	Fairness *Fairness `yaml:"fairness,omitempty"`
	// Collapse collapses redundant calls: a task with a "collapse_key"
	// that another task still waiting (not yet taken) has is collapsed
	// into it: CollapseKeepLast replaces the waiting task's payload and
	// headers, CollapseKeepFirst drops the newcomer. "" (the default)
	// collapses nothing.
	Collapse CollapseMode `yaml:"collapse,omitempty"`
	// CollapseWindow bounds how long a waiting task collapses newcomers
	// after its enqueue. Default 24h, 1s-7d; only with Collapse.
	CollapseWindow Duration `yaml:"collapse_window,omitempty"`
	// Priority, when set, serves the downstream's tasks by priority: a
	// task's "priority" from 1 (first) to 5 (last); a waiting task of a
	// higher priority is always taken before one of a lower priority.
	// Without it, tasks may name only priority 3.
	Priority *Priority `yaml:"priority,omitempty"`
	// Workers is the worker budget. Default ceil(rate × MaxWait) + 1,
	// between 2 and 1000; an explicit value may be 1-10000.
	Workers int `yaml:"workers"`
	// MaxRetry is the retry budget of tasks enqueued without one, 0-1000.
	// Default 25.
	MaxRetry int `yaml:"max_retry"`
	// Retention is how long a completed task stays readable (GET
	// /v1/tasks/{id}, asynq's Inspector) before it is deleted: asynq's
	// Retention, 0-7 days; 0 keeps none. Default 1h. Redis holds about
	// rate × retention completed tasks.
	Retention Duration `yaml:"retention"`
	// Handler delivers a released task.
	Handler Handler `yaml:"handler"`
	// Admission, when set, limits what may be enqueued.
	Admission *Admission `yaml:"admission,omitempty"`
	// Schedule changes the rate at times of day (see RateChange); Rate
	// holds until a change has fired.
	Schedule []RateChange `yaml:"schedule,omitempty"`
	// Timezone the schedule's cron expressions are read in (IANA name,
	// e.g. Europe/Berlin); default UTC.
	Timezone string `yaml:"timezone,omitempty"`
	// Adaptive lets the downstream's answers move the rate (AIMD).
	Adaptive *Adaptive `yaml:"adaptive,omitempty"`
	// Batch aggregates the downstream's tasks into batches; the rate then
	// counts rows (see batch.go).
	Batch *Batch `yaml:"batch,omitempty"`
	// Breaker stops releases while the downstream is down (see
	// breaker.go).
	Breaker *Breaker `yaml:"breaker,omitempty"`
	// Quotas are budgets the releases never pass beside the rate (see
	// Quota and quotas.go).
	Quotas []Quota `yaml:"quotas,omitempty"`
	// ShapingMode is ModeEnforce (default) or ModeShadow: in shadow every
	// task still reserves its slot (so the bucket's waits are the ones
	// enforcing would give) but is released at once (see rollout.go).
	ShapingMode Mode `yaml:"shaping_mode,omitempty"`
	// OnLate is what becomes of a task with a deadline it cannot meet:
	// LateArchive (default) or LateReject (see rollout.go).
	OnLate OnLate `yaml:"on_late,omitempty"`
}

// CollapseMode is what a collapse does: "keep_last" or "keep_first".
type CollapseMode string

// The collapse modes.
const (
	CollapseKeepLast  CollapseMode = "keep_last"
	CollapseKeepFirst CollapseMode = "keep_first"
)

// Priority is a downstream's priority setting.
type Priority struct {
	// Default is the priority of a task that names none, 1-5. Default 3.
	Default int `yaml:"default,omitempty"`
	// Weights, when set, serve the levels by weight instead of strictly
	// in order (priority.Weights): level (1-5) -> weight (1-1000); a
	// level not listed has weight 1. Empty (the default): strict.
	Weights PriorityWeights `yaml:"weights,omitempty"`
}

// PriorityWeights are a downstream's priority weights, level -> weight.
type PriorityWeights map[int]int

// UnmarshalYAML reads a mapping of levels to weights, each an integer as
// written: a weight of 2.5 is an error, not 2, and so is a level given
// twice.
func (w *PriorityWeights) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return nodeError(n, "invalid weights %s (want a mapping of levels to weights, e.g. {1: 8, 5: 1})", q(n.Value))
	}
	m := PriorityWeights{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		lv, err := strconv.Atoi(k.Value)
		if k.Kind != yaml.ScalarNode || err != nil {
			return nodeError(k, "mapping key %s is not a level (want an integer from 1 to 5)", q(k.Value))
		}
		if _, dup := m[lv]; dup {
			return nodeError(k, "mapping key %s: level %d is given twice", q(k.Value), lv)
		}
		if m[lv], err = strconv.Atoi(v.Value); v.Kind != yaml.ScalarNode || err != nil {
			return nodeError(v, "invalid weight %s (want an integer from 1 to %d)", q(v.Value), priority.MaxWeight)
		}
	}
	*w = m
	return nil
}

// Fairness shares a downstream's rate among the keys (the task's key:
// tenant, user, API key) that have tasks waiting.
type Fairness struct {
	// Key says what a share belongs to; only "tenant" (the task's key,
	// the default) for now.
	Key KeyScope `yaml:"key,omitempty"`
	// Weights by key; keys not listed have DefaultWeight. Each in
	// (0, 1000000].
	Weights map[string]float64 `yaml:"weights,omitempty"`
	// DefaultWeight is the weight of unlisted keys. Default 1.
	DefaultWeight float64 `yaml:"default_weight,omitempty"`
	// KeyRate, when set, caps each key's rate, e.g. "10/s"; at most the
	// downstream's rate.
	KeyRate Rate `yaml:"key_rate,omitempty"`
	// KeyRates caps the keys listed at their own rate in place of
	// KeyRate (tiers), each at most the downstream's rate.
	KeyRates map[string]Rate `yaml:"key_rates,omitempty"`
}

// HandlerType says how a released task is delivered.
type HandlerType string

// The handler types.
const (
	// HandlerHTTP sends the payload to URL.
	HandlerHTTP HandlerType = "http"
	// HandlerLog logs the task (for trying things out).
	HandlerLog HandlerType = "log"
	// HandlerGo runs a Go handler registered in code under the
	// downstream's name.
	HandlerGo HandlerType = "go"
)

// Handler delivers released tasks of one downstream.
type Handler struct {
	Type HandlerType `yaml:"type"`
	// URL is the http(s) endpoint; required for HandlerHTTP, and only
	// allowed there (as are Method and Headers).
	URL string `yaml:"url,omitempty"`
	// Method is the HTTP method. Default POST.
	Method  string            `yaml:"method,omitempty"`
	Headers map[string]string `yaml:"headers,omitempty"`
	// Timeout bounds one delivery. Default 10s.
	Timeout Duration `yaml:"timeout"`
	// CostHeader names a response header carrying what the call really
	// cost (e.g. X-Request-Cost); CostJSON is a dot path to it in a JSON
	// body (e.g. data.cost), read when the header is absent. The task's
	// cost is settled to it after the call. HandlerHTTP only.
	CostHeader string `yaml:"cost_header,omitempty"`
	CostJSON   string `yaml:"cost_json,omitempty"`
	// DSNEnv, Table, Columns, IDColumn and OnConflict configure
	// HandlerPostgres, and only it (see batch.go).
	DSNEnv     string            `yaml:"dsn_env,omitempty"`
	Table      string            `yaml:"table,omitempty"`
	Columns    map[string]string `yaml:"columns,omitempty"`
	IDColumn   string            `yaml:"id_column,omitempty"`
	OnConflict string            `yaml:"on_conflict,omitempty"`
}

// OnReject is what happens to a task that admission rejects.
type OnReject string

// The OnReject values.
const (
	// Reject refuses the task; the producer gets a Retry-After.
	Reject OnReject = "reject"
	// Defer enqueues the task to run once the limiters would allow it.
	Defer OnReject = "defer"
)

// Failure policies, as written in the file; see Admission.Policy.
const (
	FailClosed = "fail_closed"
	FailOpen   = "fail_open"
)

// Admission is a downstream's stack of admission limiters.
type Admission struct {
	// OnReject is Reject (default) or Defer.
	OnReject OnReject `yaml:"on_reject"`
	// Failure is FailClosed (default) or FailOpen: what the limiters do
	// when Redis fails.
	Failure string `yaml:"failure"`
	// Prefilter rejects keys known to be over their limit in-process.
	Prefilter bool `yaml:"prefilter"`
	// Limiters are asked in order; all must allow. At least one.
	Limiters []Limiter `yaml:"limiters"`
}

// KeyScope says which key an admission limiter counts under.
type KeyScope string

// The key scopes.
const (
	// KeyTenant counts each tenant separately.
	KeyTenant KeyScope = "tenant"
	// KeyGlobal counts every task of the downstream together.
	KeyGlobal KeyScope = "global"
)

// Limiter is one admission limiter.
type Limiter struct {
	// Name names the limiter's keys and metrics. Default
	// "<downstream>-<index>". Limiters of several downstreams may share a
	// name, and so their Redis state, if they agree on algorithm, rate,
	// burst and sub-windows.
	Name string `yaml:"name"`
	// Algorithm is one of limiters.Algorithms(). Default token_bucket.
	Algorithm limiters.Algorithm `yaml:"algorithm"`
	// Key is KeyTenant (default) or KeyGlobal.
	Key KeyScope `yaml:"key"`
	// Rate is the limit in limiters.ParseLimit syntax, e.g. "10/s".
	Rate Rate `yaml:"rate"`
	// Burst is the bucket capacity. Left out of the file (0 in a Config
	// built in code) it is the rate's count; written as 0 in the file it is
	// an error. The window algorithms count Rate per window, so Burst must
	// be left out or equal it.
	Burst int64 `yaml:"burst,omitempty"`
	// SubWindows, with sliding_counter only, splits the window into that
	// many sub-windows (2 to limiters.MaxSubWindows); 0 (the default) is
	// the two-window counter. See limiters.Config.SubWindows.
	SubWindows int `yaml:"sub_windows,omitempty"`
	// Mode is ModeEnforce (default) or ModeShadow: a shadow limiter is
	// decided and charged but never rejects (see rollout.go).
	Mode Mode `yaml:"mode,omitempty"`
}

// Downstream returns the downstream called name.
func (c *Config) Downstream(name string) (Downstream, bool) {
	for _, d := range c.Downstreams {
		if d.Name == name {
			return d, true
		}
	}
	return Downstream{}, false
}

// Limit is the downstream's shaping rate: Rate, with capacity Burst (1
// when Burst is 0). It is the zero Limit when Rate does not parse, which
// Validate reports.
func (d Downstream) Limit() limiters.Limit {
	if d.Rate.Limit().IsZero() {
		return limiters.Limit{}
	}
	return d.Rate.Limit().WithBurst(cmp.Or(d.Burst, DefaultBurst))
}

// MaxWaitDuration is how long a worker may hold a task for its slot:
// MaxWait, or Capacity / rate when Capacity is set.
func (d Downstream) MaxWaitDuration() time.Duration {
	if d.Capacity > 0 {
		return d.Limit().Interval(d.Capacity)
	}
	return time.Duration(d.MaxWait)
}

// DefaultMaxCost is the downstream's max cost when MaxCost is left out:
// what the bucket holds (sizing.DefaultMaxCost: rate × the max wait, or
// Burst, at least 1), within the smallest quota and what a spread quota
// paces in a day (sizing.SpreadUnits), per row of a batch.
func (d Downstream) DefaultMaxCost() int64 {
	m := sizing.DefaultMaxCost(d.Limit(), d.MaxWaitDuration(), d.Burst)
	if c := quota.CostCap(d.QuotasModel(), d.batchRows()); c > 0 {
		m = min(m, c)
	}
	return m
}

// MaxReleaseCost is the most one release may cost: MaxCost (or its
// default), times MaxRows for a batch.
func (d Downstream) MaxReleaseCost() int64 {
	c, rows := cmp.Or(d.MaxCost, d.DefaultMaxCost()), d.batchRows()
	if c > math.MaxInt64/rows {
		return math.MaxInt64
	}
	return c * rows
}

// batchRows is the rows of a full batch (1 without a batch).
func (d Downstream) batchRows() int64 {
	if d.Batch != nil && d.Batch.MaxRows > 1 {
		return int64(d.Batch.MaxRows)
	}
	return 1
}

// Limit is the limiter's rate: Rate, with capacity Burst (the rate's count
// when Burst is 0). It is the zero Limit when Rate does not parse.
func (l Limiter) Limit() limiters.Limit {
	lim := l.Rate.Limit()
	if l.Burst > 0 && !lim.IsZero() {
		lim = lim.WithBurst(l.Burst)
	}
	return lim
}

// Policy is the limiters' failure policy: limiters.FailOpen for
// "fail_open", otherwise limiters.FailClosed.
func (a Admission) Policy() limiters.Policy {
	if a.Failure == FailOpen {
		return limiters.FailOpen
	}
	return limiters.FailClosed
}

// Embedded reports whether r asks for the embedded in-process Redis: no
// URL, Cluster or Sentinel.
func (r Redis) Embedded() bool {
	return r.URL == "" && len(r.Cluster) == 0 && r.Sentinel == nil
}

// String describes r without any secret, e.g.
// "redis://10.0.0.5:6379/0 user=app password=env:SHAPER_REDIS_PASSWORD prefix=shaper timeout=2s".
func (r Redis) String() string {
	var b strings.Builder
	switch {
	case len(r.Cluster) > 0:
		b.WriteString("cluster " + strings.Join(r.Cluster, ","))
	case r.Sentinel != nil:
		b.WriteString("sentinel " + r.Sentinel.Master + "@" + strings.Join(r.Sentinel.Addrs, ","))
	case r.URL != "":
		b.WriteString(redactURL(r.URL))
	default:
		b.WriteString("embedded")
	}
	if r.Username != "" {
		b.WriteString(" user=" + r.Username)
	}
	switch {
	case r.PasswordEnv != "":
		b.WriteString(" password=env:" + r.PasswordEnv)
	case r.PasswordFile != "":
		b.WriteString(" password=file:" + r.PasswordFile)
	}
	if r.TLSCAFile != "" {
		b.WriteString(" ca=" + r.TLSCAFile)
	}
	fmt.Fprintf(&b, " prefix=%s timeout=%s", r.Prefix, r.Timeout)
	return b.String()
}

// Enabled reports whether the HTTP server should run.
func (h HTTP) Enabled() bool { return h.Listen != "" && h.Listen != ListenOff }
