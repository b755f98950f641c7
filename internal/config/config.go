// Package config loads and validates shaper's YAML configuration, the one
// file shared by the shaper daemon and the enqueue CLI.
//
// Parse decodes strictly (an unknown field is an error), fills defaults and
// validates. Every error is a single line that names the position in the
// file when it is known, the field path and the bad value, and wraps
// ErrInvalid:
//
//	config: shaper.yaml:14: downstreams[1].rate: invalid rate "fast" (want <number>/<unit>, e.g. 50/s)
//
// A field left out of the file gets its default; a field written with a
// zero value keeps it, so "workers: 0" is an error rather than the default
// and "max_retry: 0" means no retries. A field written as null ("timeout:"
// or "timeout: ~") counts as left out.
//
// Secrets never live in the file or in a Config: Redis.Password and
// HTTP.Token read the environment (or a file) each time they are called.
//
// testdata/example.yaml documents every field.
package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/shaping"
)

// ErrInvalid is wrapped by every error about a configuration's content;
// test with errors.Is. Errors from reading the file itself (it does not
// exist, permission denied) do not wrap it.
var ErrInvalid = errors.New("config: invalid")

// Defaults for fields left out of the file.
const (
	DefaultRedisTimeout    = 2 * time.Second
	DefaultListen          = "127.0.0.1:8080"
	DefaultMaxBody         = ByteSize(1 << 20)
	DefaultShutdownTimeout = 10 * time.Second
	DefaultBurst           = 1
	DefaultMaxWait         = time.Second
	DefaultMaxRetry        = 25
	DefaultHandlerTimeout  = 10 * time.Second
	DefaultMethod          = "POST"
)

// ListenOff is the HTTP.Listen value that disables the HTTP server. An
// explicit empty listen address in the file becomes ListenOff.
const ListenOff = "off"

const (
	maxDefaultWorkers = 1000  // cap of the computed default
	maxWorkers        = 10000 // cap of an explicit value
	maxRetryLimit     = 1000
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
// only). Redis holds no secret: the password is read by Password.
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
}

// Downstream is one protected system: its own queue, shaping bucket and
// worker budget.
type Downstream struct {
	// Name is unique, 1-64 of [A-Za-z0-9_.-]; it names the queue and keys.
	Name string `yaml:"name"`
	// Rate is the release rate in limiters.ParseLimit syntax, e.g. "50/s".
	Rate string `yaml:"rate"`
	// Burst is how many releases may go out back to back. Default 1.
	Burst int64 `yaml:"burst"`
	// MaxWait is how long a worker may hold a task waiting for its slot.
	// Default 1s, at most MaxMaxWait. Exclusive with Capacity, and zero
	// when Capacity is set; use MaxWaitDuration.
	MaxWait Duration `yaml:"max_wait,omitempty"`
	// Capacity is the number of tasks the bucket may hold, an alternative
	// way to say MaxWait: MaxWait = Capacity / rate.
	Capacity int64 `yaml:"capacity,omitempty"`
	// MaxCost is the largest cost one task may carry; a task above it is
	// refused at enqueue. Default: what the bucket holds, rate × MaxWait
	// (or Burst), at least 1 (shaping.DefaultMaxCost).
	MaxCost int64 `yaml:"max_cost,omitempty"`
	// Workers is the worker budget. Default ceil(rate × MaxWait) + 1,
	// between 2 and 1000; an explicit value may be 1-10000.
	Workers int `yaml:"workers"`
	// MaxRetry is the retry budget of tasks enqueued without one, 0-1000.
	// Default 25.
	MaxRetry int `yaml:"max_retry"`
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
	Rate string `yaml:"rate"`
	// Burst is the bucket capacity. Left out of the file (0 in a Config
	// built in code) it is the rate's count; written as 0 in the file it is
	// an error. The window algorithms count Rate per window, so Burst must
	// be left out or equal it.
	Burst int64 `yaml:"burst,omitempty"`
	// SubWindows, with sliding_counter only, splits the window into that
	// many sub-windows (2 to limiters.MaxSubWindows); 0 (the default) is
	// the two-window counter. See limiters.Config.SubWindows.
	SubWindows int `yaml:"sub_windows,omitempty"`
}

// Load reads and parses the file at path. Errors about its content name
// the file and line, e.g. "config: shaper.yaml:14: downstreams[1].rate: …".
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(data)
	if e, ok := errors.AsType[*Error](err); ok {
		e.File = path
	}
	return c, err
}

// Parse decodes a YAML document strictly, fills the defaults and validates
// the result. The error, if any, is an *Error.
func Parse(data []byte) (*Config, error) {
	// First as a node tree: syntax errors, line numbers, and which fields
	// the file sets (a default fills only a field that is left out).
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil && err != io.EOF {
		return nil, syntaxError(err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, &Error{Line: extra.Line, Msg: "more than one YAML document (remove the second ---)"}
	case err != io.EOF:
		return nil, syntaxError(err)
	}
	idx := newIndex(&root)

	// Then into the structs, rejecting unknown fields.
	c := new(Config)
	if len(root.Content) > 0 {
		strict := yaml.NewDecoder(bytes.NewReader(data))
		strict.KnownFields(true)
		if err := strict.Decode(c); err != nil {
			return nil, idx.decodeError(err)
		}
	}
	if e := c.fill(idx.isSet); e != nil {
		e.Line = idx.line(e.Path)
		return nil, e
	}
	if e := c.validate(); e != nil {
		e.Line = idx.line(e.Path)
		return nil, e
	}
	return c, nil
}

// Validate checks a complete Config (as Parse returns it: Validate fills
// no defaults). The error, if any, is an *Error naming the first bad field.
func (c *Config) Validate() error {
	if e := c.validate(); e != nil {
		return e
	}
	return nil
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

// Limit is the downstream's shaping rate: Rate parsed, with capacity Burst
// (1 when Burst is 0). It is the zero Limit when Rate does not parse, which
// Validate reports.
func (d Downstream) Limit() limiters.Limit {
	l, err := limiters.ParseLimit(d.Rate)
	if err != nil {
		return limiters.Limit{}
	}
	return l.WithBurst(cmp.Or(d.Burst, DefaultBurst))
}

// MaxWaitDuration is how long a worker may hold a task for its slot:
// MaxWait, or Capacity / rate when Capacity is set.
func (d Downstream) MaxWaitDuration() time.Duration {
	if d.Capacity > 0 {
		return d.Limit().Interval(d.Capacity)
	}
	return time.Duration(d.MaxWait)
}

// Limit is the limiter's rate: Rate parsed, with capacity Burst (the rate's
// count when Burst is 0). It is the zero Limit when Rate does not parse.
func (l Limiter) Limit() limiters.Limit {
	lim, err := limiters.ParseLimit(l.Rate)
	if err != nil {
		return limiters.Limit{}
	}
	if l.Burst > 0 {
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

// Password reads the Redis password from the environment variable or file
// the configuration names, now; "" when it names neither. A variable that
// is unset or empty, or a file that is unreadable or empty, is an error.
// Do not keep the result longer than needed, and never log it.
func (r Redis) Password() (string, error) {
	switch {
	case r.PasswordEnv != "":
		return fromEnv("redis.password_env", r.PasswordEnv)
	case r.PasswordFile != "":
		b, err := os.ReadFile(r.PasswordFile)
		if err != nil {
			return "", &Error{Path: "redis.password_file", Msg: err.Error(), Err: err}
		}
		s := strings.TrimSpace(string(b))
		if s == "" {
			return "", &Error{Path: "redis.password_file", Msg: fmt.Sprintf("file %s is empty", q(r.PasswordFile))}
		}
		return s, nil
	}
	return "", nil
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

// Token reads the bearer token from the environment variable TokenEnv
// names, now; "" when TokenEnv is empty (no token required). An unset or
// empty variable is an error. Never log the result.
func (h HTTP) Token() (string, error) {
	if h.TokenEnv == "" {
		return "", nil
	}
	return fromEnv("http.token_env", h.TokenEnv)
}

func fromEnv(path, name string) (string, error) {
	v, ok := os.LookupEnv(name)
	switch {
	case !ok:
		return "", &Error{Path: path, Msg: fmt.Sprintf("environment variable %s is not set", name)}
	case v == "":
		return "", &Error{Path: path, Msg: fmt.Sprintf("environment variable %s is empty", name)}
	}
	return v, nil
}

// Duration is a time.Duration written as a string such as "2s", "500ms"
// or "1m30s". Convert with time.Duration(d).
type Duration time.Duration

// String formats d like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML parses a duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		return nodeError(n, "invalid duration %s (want a number with a unit, e.g. 2s, 500ms or 1m30s)", q(n.Value))
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes d as a duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// ByteSize is a size in bytes, written as a plain number of bytes or with
// a unit: B, KiB (1024) or MiB (1024²), e.g. "1MiB" or 65536.
type ByteSize int64

type sizeUnit struct {
	name string
	mult int64
}

var sizeUnits = []sizeUnit{{"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

// String formats s with the largest unit that divides it, e.g. "1MiB".
func (s ByteSize) String() string {
	for _, u := range sizeUnits {
		if s != 0 && int64(s)%u.mult == 0 {
			return strconv.FormatInt(int64(s)/u.mult, 10) + u.name
		}
	}
	return strconv.FormatInt(int64(s), 10) + "B"
}

// UnmarshalYAML parses a size.
func (s *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	v, ok := parseSize(n.Value)
	if n.Kind != yaml.ScalarNode || !ok {
		return nodeError(n, "invalid size %s (want bytes, or a whole number with B, KiB or MiB, e.g. 1MiB)", q(n.Value))
	}
	*s = ByteSize(v)
	return nil
}

// MarshalYAML writes s as a size string.
func (s ByteSize) MarshalYAML() (any, error) { return s.String(), nil }

func parseSize(str string) (int64, bool) {
	str = strings.TrimSpace(str)
	end := strings.IndexFunc(str, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(str)
	}
	num, unit := str[:end], strings.TrimSpace(str[end:])
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, false
	}
	mult := int64(1)
	if unit != "" {
		i := slices.IndexFunc(sizeUnits, func(u sizeUnit) bool { return u.name == unit })
		if i < 0 {
			return 0, false
		}
		mult = sizeUnits[i].mult
	}
	if v > math.MaxInt64/mult {
		return 0, false
	}
	return v * mult, true
}

// nodeError is an error from an UnmarshalYAML method, as a *yaml.TypeError
// so that the decoder collects it in document order with its own errors.
func nodeError(n *yaml.Node, format string, args ...any) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: ", n.Line) + fmt.Sprintf(format, args...)}}
}

// Error is one problem with a configuration. It wraps ErrInvalid and Err.
// Its message is one line: "config: [<file>:<line>: | line <n>: ][<path>: ]<msg>".
type Error struct {
	// File is the file Load read; "" for Parse and Validate.
	File string
	// Line is the 1-based line in the YAML; 0 when unknown.
	Line int
	// Path is the field, e.g. "downstreams[1].rate"; "" for syntax errors.
	Path string
	// Msg says what is wrong and quotes the bad value.
	Msg string
	// Err is the underlying cause, if any.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("config: ")
	switch {
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	case e.File != "":
		b.WriteString(e.File + ": ")
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(b.String())
}

// Unwrap returns ErrInvalid and the cause.
func (e *Error) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalid, e.Err}
	}
	return []error{ErrInvalid}
}

func errf(path, format string, args ...any) *Error {
	return &Error{Path: path, Msg: fmt.Sprintf(format, args...)}
}

// q quotes a value for an error message, shortened if it is long.
func q(s string) string {
	const max = 80
	if utf8.RuneCountInString(s) > max {
		s = string([]rune(s)[:max]) + "…"
	}
	return strconv.Quote(s)
}

var reSyntax = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func syntaxError(err error) *Error {
	msg := err.Error()
	if m := reSyntax.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &Error{Line: line, Msg: m[2]}
	}
	return &Error{Msg: strings.TrimPrefix(msg, "yaml: ")}
}

// ---- defaults ----

// fill sets the defaults of the fields the file leaves out; set reports
// whether the file sets a field path. It reports the errors that only the
// file's text shows (a field written with a zero value where the default
// would hide it).
func (c *Config) fill(set func(path string) bool) *Error {
	for i := range c.Cron {
		j := &c.Cron[i]
		p := fmt.Sprintf("cron[%d]", i)
		if !set(p + ".cost") {
			j.Cost = 1
		}
		j.Type = cmp.Or(j.Type, "shaper:cron")
	}
	r := &c.Redis
	r.Prefix = cmp.Or(r.Prefix, keys.DefaultPrefix)
	if !set("redis.timeout") {
		r.Timeout = Duration(DefaultRedisTimeout)
	}
	h := &c.HTTP
	switch {
	case !set("http.listen"):
		h.Listen = DefaultListen
	case h.Listen == "":
		h.Listen = ListenOff
	}
	if !set("http.max_body") {
		h.MaxBody = DefaultMaxBody
	}
	if !set("shutdown_timeout") {
		c.ShutdownTimeout = Duration(DefaultShutdownTimeout)
	}
	for i := range c.Downstreams {
		d := &c.Downstreams[i]
		p := fmt.Sprintf("downstreams[%d]", i)
		if !set(p + ".burst") {
			d.Burst = DefaultBurst
		}
		hasWait, hasCap := set(p+".max_wait"), set(p+".capacity")
		switch {
		case hasWait && hasCap:
			return errf(p+".capacity", "%d set together with max_wait %s (use one: capacity = max_wait × rate)", d.Capacity, d.MaxWait)
		case hasCap && d.Capacity == 0:
			return errf(p+".capacity", "must be at least 1, got 0")
		case !hasWait && !hasCap:
			d.MaxWait = Duration(DefaultMaxWait)
		}
		if !set(p + ".workers") {
			d.Workers = defaultWorkers(d.Limit(), d.MaxWaitDuration())
		}
		if !set(p + ".max_retry") {
			d.MaxRetry = DefaultMaxRetry
		}
		if d.Handler.Type == HandlerHTTP {
			d.Handler.Method = cmp.Or(d.Handler.Method, DefaultMethod)
		}
		if !set(p + ".handler.timeout") {
			d.Handler.Timeout = Duration(DefaultHandlerTimeout)
		}
		d.fillBatch(p, set)
		if a := d.Admission; a != nil {
			a.OnReject = cmp.Or(a.OnReject, Reject)
			a.Failure = cmp.Or(a.Failure, FailClosed)
			for j := range a.Limiters {
				l := &a.Limiters[j]
				if lp := fmt.Sprintf("%s.admission.limiters[%d].burst", p, j); set(lp) && l.Burst == 0 {
					return errf(lp, "must be at least 1, got 0 (leave burst out for the rate's count)")
				}
				l.Name = cmp.Or(l.Name, fmt.Sprintf("%s-%d", d.Name, j))
				l.Algorithm = cmp.Or(l.Algorithm, limiters.TokenBucket)
				l.Key = cmp.Or(l.Key, KeyTenant)
			}
		}
	}
	return nil
}

// defaultWorkers is the dispatcher's default (shaping.DefaultWorkers).
func defaultWorkers(l limiters.Limit, wait time.Duration) int {
	return shaping.DefaultWorkers(l, wait)
}

// ---- validation ----

var (
	reName   = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	reLimit  = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`) // limiters.Config.Name
	rePrefix = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)
	reEnv    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	reToken  = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$") // RFC 9110 token
)

var httpMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

func (c *Config) validate() *Error {
	if e := c.validateDownstreams(); e != nil {
		return e
	}
	return c.validateCron() // needs every downstream's name
}

func (c *Config) validateDownstreams() *Error {
	if e := c.Redis.validate(); e != nil {
		return e
	}
	if e := c.HTTP.validate(); e != nil {
		return e
	}
	if c.ShutdownTimeout <= 0 {
		return errf("shutdown_timeout", "must be positive, got %s", c.ShutdownTimeout)
	}
	if len(c.Downstreams) == 0 {
		return errf("downstreams", "at least one downstream is required, got none")
	}
	names := map[string]string{}    // downstream name → path
	lims := map[string]limiterUse{} // limiter name → first use
	for i := range c.Downstreams {
		d := &c.Downstreams[i]
		p := fmt.Sprintf("downstreams[%d]", i)
		if e := d.validate(p); e != nil {
			return e
		}
		if first, dup := names[d.Name]; dup {
			return errf(p+".name", "duplicate name %s (first at %s)", q(d.Name), first)
		}
		names[d.Name] = p
		if e := d.validateSchedule(p); e != nil {
			return e
		}
		if d.Admission == nil {
			continue
		}
		for j, l := range d.Admission.Limiters {
			lp := fmt.Sprintf("%s.admission.limiters[%d]", p, j)
			u := limiterUse{downstream: i, path: lp, alg: l.Algorithm, limit: l.Limit(), sub: l.SubWindows}
			first, ok := lims[l.Name]
			if !ok {
				lims[l.Name] = u
				continue
			}
			if first.downstream == i {
				return errf(lp+".name", "duplicate name %s (first at %s)", q(l.Name), first.path)
			}
			if first.alg != u.alg || first.limit != u.limit || first.sub != u.sub {
				return errf(lp+".name", "%s is also the name of %s, which has another algorithm or limit (a name is one limiter: its Redis state and metrics)", q(l.Name), first.path)
			}
		}
	}
	return nil
}

type limiterUse struct {
	downstream int
	path       string
	alg        limiters.Algorithm
	limit      limiters.Limit
	sub        int
}

func (r *Redis) validate() *Error {
	var modes []string
	if r.URL != "" {
		modes = append(modes, "url")
	}
	if len(r.Cluster) > 0 {
		modes = append(modes, "cluster")
	}
	if r.Sentinel != nil {
		modes = append(modes, "sentinel")
	}
	if len(modes) > 1 {
		return errf("redis."+modes[1], "set together with redis.%s (use one of url, cluster or sentinel)", modes[0])
	}
	if r.URL != "" {
		if e := checkRedisURL(r.URL); e != nil {
			return e
		}
	}
	for i, a := range r.Cluster {
		if msg := checkAddr(a); msg != "" {
			return errf(fmt.Sprintf("redis.cluster[%d]", i), "%s", msg)
		}
	}
	if s := r.Sentinel; s != nil {
		if s.Master == "" {
			return errf("redis.sentinel.master", "required")
		}
		if len(s.Addrs) == 0 {
			return errf("redis.sentinel.addrs", "at least one sentinel address is required")
		}
		for i, a := range s.Addrs {
			if msg := checkAddr(a); msg != "" {
				return errf(fmt.Sprintf("redis.sentinel.addrs[%d]", i), "%s", msg)
			}
		}
	}
	auth := map[string]string{"password_env": r.PasswordEnv, "password_file": r.PasswordFile, "username": r.Username, "tls_ca_file": r.TLSCAFile}
	if r.Embedded() {
		for _, f := range []string{"username", "password_env", "password_file", "tls_ca_file"} {
			if auth[f] != "" {
				return errf("redis."+f, "%s is set but redis.url, cluster and sentinel are empty (the embedded Redis takes no credentials; is redis.url missing?)", q(auth[f]))
			}
		}
	}
	if r.PasswordEnv != "" && r.PasswordFile != "" {
		return errf("redis.password_file", "%s set together with password_env %s (use one)", q(r.PasswordFile), q(r.PasswordEnv))
	}
	if r.PasswordEnv != "" && !reEnv.MatchString(r.PasswordEnv) {
		return errf("redis.password_env", "invalid environment variable name %s", q(r.PasswordEnv))
	}
	if r.TLSCAFile != "" && !strings.HasPrefix(r.URL, "rediss://") {
		return errf("redis.tls_ca_file", "%s needs a rediss:// url", q(r.TLSCAFile))
	}
	if !rePrefix.MatchString(r.Prefix) {
		return errf("redis.prefix", "invalid prefix %s (want [A-Za-z0-9._-]+)", q(r.Prefix))
	}
	if r.Timeout <= 0 {
		return errf("redis.timeout", "must be positive, got %s", r.Timeout)
	}
	return nil
}

func checkRedisURL(s string) *Error {
	const path = "redis.url"
	shown := q(redactURL(s))
	scheme, _, ok := strings.Cut(s, "://")
	if !ok {
		return errf(path, "invalid URL %s (want redis://host:port/db or rediss://…)", shown)
	}
	if scheme != "redis" && scheme != "rediss" {
		return errf(path, "unsupported scheme %s (want redis:// or rediss://)", q(scheme))
	}
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return errf(path, "invalid URL %s: %v", shown, err)
	}
	if _, ok := u.User.Password(); ok {
		return errf(path, "%s contains a password (use password_env or password_file)", shown)
	}
	if u.Hostname() == "" {
		return errf(path, "%s has no host", shown)
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return errf(path, "%s: invalid port %s", shown, q(port))
		}
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" {
		if n, err := strconv.Atoi(db); err != nil || n < 0 {
			return errf(path, "%s: invalid database number %s", shown, q(db))
		}
	}
	return nil
}

// checkAddr says what is wrong with a host:port address, or "".
func checkAddr(a string) string {
	host, port, err := net.SplitHostPort(a)
	if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
		return fmt.Sprintf("invalid address %s (want host:port)", q(a))
	}
	return ""
}

// redactURL hides the password of a URL, parsable or not.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if i := strings.LastIndex(rest, "@"); ok && i >= 0 {
		return scheme + "://xxxxx@" + rest[i+1:]
	}
	if i := strings.LastIndex(s, "@"); i >= 0 {
		return "xxxxx@" + s[i+1:]
	}
	return s
}

func (h *HTTP) validate() *Error {
	if h.Enabled() {
		_, port, err := net.SplitHostPort(h.Listen)
		if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
			return errf("http.listen", "invalid address %s (want host:port, e.g. 127.0.0.1:8080, or %q to disable)", q(h.Listen), ListenOff)
		}
	}
	if h.TokenEnv != "" && !reEnv.MatchString(h.TokenEnv) {
		return errf("http.token_env", "invalid environment variable name %s", q(h.TokenEnv))
	}
	if h.MaxBody <= 0 {
		return errf("http.max_body", "must be positive, got %s", q(strconv.FormatInt(int64(h.MaxBody), 10)))
	}
	if h.MaxBody > MaxMaxBody {
		return errf("http.max_body", "must be at most %s, got %s", MaxMaxBody, h.MaxBody)
	}
	return h.checkExposure()
}

func (d *Downstream) validate(p string) *Error {
	if msg := checkName(d.Name); msg != "" {
		return errf(p+".name", "%s", msg)
	}
	if d.Rate == "" {
		return errf(p+".rate", "required (e.g. 50/s)")
	}
	if e := checkRate(p+".rate", d.Rate); e != nil {
		return e
	}
	if d.Burst < 1 {
		return errf(p+".burst", "must be at least 1, got %d", d.Burst)
	}
	if err := d.Limit().Validate(); err != nil {
		return errf(p+".burst", "burst %d with rate %s: %s", d.Burst, q(d.Rate), limitMsg(err))
	}
	switch {
	case d.MaxWait < 0:
		return errf(p+".max_wait", "must be positive, got %s", d.MaxWait)
	case d.Capacity < 0:
		return errf(p+".capacity", "must be at least 1, got %d", d.Capacity)
	case d.MaxWait != 0 && d.Capacity != 0:
		return errf(p+".capacity", "%d set together with max_wait %s (use one: capacity = max_wait × rate)", d.Capacity, d.MaxWait)
	case d.MaxWait == 0 && d.Capacity == 0:
		return errf(p+".max_wait", "must be positive, got %s", d.MaxWait)
	case time.Duration(d.MaxWait) > MaxMaxWait:
		return errf(p+".max_wait", "must be at most %s, got %s (a task waiting longer belongs in the queue)", MaxMaxWait, d.MaxWait)
	case d.Capacity > 0 && (d.MaxWaitDuration() > MaxMaxWait || d.MaxWaitDuration() <= 0):
		return errf(p+".capacity", "%d at rate %s is more than %s of waiting (at most %s)", d.Capacity, q(d.Rate), MaxMaxWait, MaxMaxWait)
	}
	if d.MaxCost < 0 {
		return errf(p+".max_cost", "must be at least 1, got %d", d.MaxCost)
	}
	if d.MaxCost > 0 && d.Limit().Interval(d.MaxCost) > shaping.MaxInterval {
		return errf(p+".max_cost", "%d at rate %s would hold the downstream for %s, over the limit of %s", d.MaxCost, q(d.Rate), d.Limit().Interval(d.MaxCost).Round(time.Second), shaping.MaxInterval)
	}
	if d.Workers < 1 || d.Workers > maxWorkers {
		return errf(p+".workers", "must be 1-%d, got %d", maxWorkers, d.Workers)
	}
	if d.MaxRetry < 0 || d.MaxRetry > maxRetryLimit {
		return errf(p+".max_retry", "must be 0-%d, got %d", maxRetryLimit, d.MaxRetry)
	}
	if e := d.validateBatch(p); e != nil {
		return e
	}
	if e := d.Handler.validate(p + ".handler"); e != nil {
		return e
	}
	if d.Admission != nil {
		return d.Admission.validate(p + ".admission")
	}
	return nil
}

// checkRate reports a rate that limiters.ParseLimit rejects, in its words.
func checkRate(path, rate string) *Error {
	if _, err := limiters.ParseLimit(rate); err != nil {
		return errf(path, "%s", limitMsg(err))
	}
	return nil
}

// goFieldWords turns limiters' Go field names into the file's words.
var goFieldWords = strings.NewReplacer("Burst ", "burst ", "Period ", "the rate's period ", "Rate ", "the rate's count ")

// limitMsg is a limiters error without the package's prefix, in the
// file's words rather than Go's field names.
func limitMsg(err error) string {
	return goFieldWords.Replace(strings.Replace(err.Error(), limiters.ErrInvalidLimit.Error()+": ", "", 1))
}

func (h *Handler) validate(p string) *Error {
	if e := h.validatePostgres(p); e != nil {
		return e
	}
	switch h.Type {
	case HandlerHTTP:
		if h.URL == "" {
			return errf(p+".url", "required for an http handler")
		}
		shown := q(redactURL(h.URL))
		u, err := url.Parse(h.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			return errf(p+".url", "invalid URL %s (want http:// or https://)", shown)
		}
		if u.Hostname() == "" {
			return errf(p+".url", "%s has no host", shown)
		}
		if _, ok := u.User.Password(); ok {
			return errf(p+".url", "%s contains a password (secrets do not belong in the file)", shown)
		}
		if !slices.Contains(httpMethods, h.Method) {
			return errf(p+".method", "unsupported method %s (want one of %s)", q(h.Method), strings.Join(httpMethods, ", "))
		}
		names := make([]string, 0, len(h.Headers))
		for k := range h.Headers {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			if !reToken.MatchString(k) {
				return errf(p+".headers."+k, "invalid header name %s", q(k))
			}
			if strings.ContainsAny(h.Headers[k], "\r\n\x00") {
				// The value may be a credential: never print it.
				return errf(p+".headers."+k, "value of header %s contains a line break or NUL", q(k))
			}
		}
	case HandlerLog, HandlerGo:
		for _, f := range []struct {
			name string
			set  bool
		}{{"url", h.URL != ""}, {"method", h.Method != ""}, {"headers", len(h.Headers) > 0}} {
			if f.set {
				return errf(p+"."+f.name, "only allowed for type http, got type %s", q(string(h.Type)))
			}
		}
	case HandlerPostgres: // validatePostgres
	case "":
		return errf(p+".type", "required (http, log, go or postgres)")
	default:
		return errf(p+".type", "unknown handler type %s (want http, log, go or postgres)", q(string(h.Type)))
	}
	if h.Timeout <= 0 {
		return errf(p+".timeout", "must be positive, got %s", h.Timeout)
	}
	return nil
}

func (a *Admission) validate(p string) *Error {
	if a.OnReject != Reject && a.OnReject != Defer {
		return errf(p+".on_reject", "invalid value %s (want reject or defer)", q(string(a.OnReject)))
	}
	if a.Failure != FailClosed && a.Failure != FailOpen {
		return errf(p+".failure", "invalid value %s (want fail_closed or fail_open)", q(a.Failure))
	}
	if len(a.Limiters) == 0 {
		return errf(p+".limiters", "at least one limiter is required (leave admission out to admit everything)")
	}
	for j := range a.Limiters {
		if e := a.Limiters[j].validate(fmt.Sprintf("%s.limiters[%d]", p, j)); e != nil {
			return e
		}
	}
	return nil
}

func (l *Limiter) validate(p string) *Error {
	if !reLimit.MatchString(l.Name) {
		return errf(p+".name", "invalid name %s (want 1-128 of A-Z a-z 0-9 _ . -)", q(l.Name))
	}
	if _, err := limiters.ParseAlgorithm(string(l.Algorithm)); err != nil {
		return errf(p+".algorithm", "%s", limitMsg(err))
	}
	if l.Key != KeyTenant && l.Key != KeyGlobal {
		return errf(p+".key", "invalid value %s (want tenant or global)", q(string(l.Key)))
	}
	if l.Rate == "" {
		return errf(p+".rate", "required (e.g. 10/s)")
	}
	if e := checkRate(p+".rate", l.Rate); e != nil {
		return e
	}
	lim := l.Limit()
	switch l.Algorithm {
	case limiters.FixedWindow, limiters.SlidingLog, limiters.SlidingCounter:
		if l.Burst != 0 && l.Burst != lim.Rate {
			return errf(p+".burst", "%s counts the rate per window, so burst must be left out or equal %d (the count of rate %s), got %d", l.Algorithm, lim.Rate, q(l.Rate), l.Burst)
		}
	}
	if l.Burst < 0 {
		return errf(p+".burst", "must be at least 1, got %d", l.Burst)
	}
	if err := lim.Validate(); err != nil {
		return errf(p+".burst", "burst %d with rate %s: %s", lim.Capacity(), q(l.Rate), limitMsg(err))
	}
	if err := limiters.CheckSubWindows(l.Algorithm, lim, l.SubWindows); err != nil {
		return errf(p+".sub_windows", "%s", limitMsg(err))
	}
	return nil
}

// ---- positions ----

// index maps the fields of a YAML node tree to their lines, and lines back
// to fields, so that errors can name both.
type index struct {
	lines   map[string]int  // path → line of its key or sequence item
	set     map[string]bool // paths the file sets to something other than null
	entries []entry         // every node and key, in document order
	budget  int             // nodes left to visit (aliases can multiply them)
}

type entry struct {
	path  string
	line  int
	kind  yaml.Kind
	key   bool // a mapping key, not a value
	value string
	depth int
}

func newIndex(root *yaml.Node) *index {
	x := &index{lines: map[string]int{}, set: map[string]bool{}, budget: 1 << 16}
	x.walk(root, "", 0)
	return x
}

func (x *index) isSet(path string) bool { return x.set[path] }

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (x *index) walk(n *yaml.Node, path string, depth int) {
	x.budget--
	if x.budget < 0 || depth > 100 {
		return
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			x.walk(c, path, depth)
		}
		return
	case yaml.AliasNode:
		if n.Alias != nil {
			x.walk(n.Alias, path, depth+1)
		}
		return
	}
	x.entries = append(x.entries, entry{path: path, line: n.Line, kind: n.Kind, value: n.Value, depth: depth})
	switch n.Kind {
	case yaml.MappingNode:
		var merges []*yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.ShortTag() == "!!merge" {
				merges = append(merges, v)
				continue
			}
			x.field(path, k, v, depth)
		}
		// Merged keys (<<: *anchor) count where the mapping does not set them.
		for len(merges) > 0 {
			m := merges[0]
			merges = merges[1:]
			for m.Kind == yaml.AliasNode && m.Alias != nil {
				m = m.Alias
			}
			switch m.Kind {
			case yaml.SequenceNode:
				merges = append(merges, m.Content...)
			case yaml.MappingNode:
				for i := 0; i+1 < len(m.Content); i += 2 {
					if p := join(path, m.Content[i].Value); x.lines[p] == 0 {
						x.field(path, m.Content[i], m.Content[i+1], depth)
					}
				}
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			x.mark(p, c)
			x.walk(c, p, depth+1)
		}
	}
}

func (x *index) field(path string, k, v *yaml.Node, depth int) {
	p := join(path, k.Value)
	if x.lines[p] == 0 {
		x.lines[p] = k.Line
	}
	x.mark(p, v)
	x.entries = append(x.entries, entry{path: p, line: k.Line, kind: k.Kind, key: true, value: k.Value, depth: depth + 1})
	x.walk(v, p, depth+1)
}

func (x *index) mark(p string, v *yaml.Node) {
	if x.lines[p] == 0 {
		x.lines[p] = v.Line
	}
	if v.ShortTag() != "!!null" {
		x.set[p] = true
	}
}

// line is the line of path, or of its nearest ancestor in the file.
func (x *index) line(path string) int {
	for path != "" {
		if l := x.lines[path]; l > 0 {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 0
}

// at finds the entry that an error message about line is about: a key or
// value it quotes, else the deepest node of the kind it names, else the
// first node on the line.
func (x *index) at(line int, msg string) (entry, bool) {
	var best entry
	bestScore := -1
	for _, e := range x.entries {
		if e.line != line {
			continue
		}
		score := 0
		switch {
		case e.key && (strings.Contains(msg, "field "+e.value+" not found") || strings.Contains(msg, "mapping key "+strconv.Quote(e.value))):
			score = 3
		case !e.key && e.kind == yaml.ScalarNode && (strings.Contains(msg, strconv.Quote(e.value)) || strings.Contains(msg, "`"+e.value+"`") ||
			len(e.value) > 10 && strings.Contains(msg, "`"+e.value[:7]+"...`")):
			score = 2
		case !e.key && (e.kind == yaml.MappingNode && strings.Contains(msg, "!!map") || e.kind == yaml.SequenceNode && strings.Contains(msg, "!!seq")):
			score = 1
		}
		if score > bestScore || score == 1 && bestScore == 1 && e.depth > best.depth {
			best, bestScore = e, score
		}
	}
	return best, bestScore >= 0
}

var (
	reTypeLine  = regexp.MustCompile(`^line (\d+): (.*)$`)
	reNotFound  = regexp.MustCompile(`^field (.*) not found in type (\S+)$`)
	reUnmarshal = regexp.MustCompile("^cannot unmarshal !!(\\w+)(?: `.*`)? into (\\S+)$")
	reDupKey    = regexp.MustCompile(`^mapping key (".*") already defined at line (\d+)$`)
)

// decodeError turns an error of the strict decoder into one line that
// names the field.
func (x *index) decodeError(err error) *Error {
	var te *yaml.TypeError
	if !errors.As(err, &te) || len(te.Errors) == 0 {
		return syntaxError(err)
	}
	e := &Error{Msg: te.Errors[0]}
	if m := reTypeLine.FindStringSubmatch(te.Errors[0]); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Msg = m[2]
		if ent, ok := x.at(e.Line, e.Msg); ok {
			e.Path = ent.path
			e.Msg = explain(e.Msg, ent)
		}
	}
	if n := len(te.Errors) - 1; n == 1 {
		e.Msg += " (and 1 more error)"
	} else if n > 1 {
		e.Msg += fmt.Sprintf(" (and %d more errors)", n)
	}
	return e
}

// explain rewrites a yaml.v3 decoding message in this package's terms.
func explain(msg string, at entry) string {
	if m := reNotFound.FindStringSubmatch(msg); m != nil {
		s := fmt.Sprintf("unknown field %s", q(m[1]))
		if t, ok := schema[m[2]]; ok && t.Kind() == reflect.Struct {
			s += " (want one of " + strings.Join(yamlFields(t), ", ") + ")"
		}
		return s
	}
	if m := reDupKey.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("duplicate key %s (first at line %s)", m[1], m[2])
	}
	if m := reUnmarshal.FindStringSubmatch(msg); m != nil {
		want := "a " + m[2]
		if t, ok := schema[m[2]]; ok {
			want = kindName(t)
		}
		if at.kind == yaml.ScalarNode && !at.key {
			return fmt.Sprintf("invalid value %s (want %s)", q(at.value), want)
		}
		got := m[1]
		switch got {
		case "map":
			got = "mapping"
		case "seq":
			got = "list"
		}
		return fmt.Sprintf("got a %s, want %s", got, want)
	}
	return msg
}

// schema maps the name of every type in Config, as reflect prints it, to
// the type, for error messages.
var schema = func() map[string]reflect.Type {
	m := map[string]reflect.Type{}
	var add func(reflect.Type)
	add = func(t reflect.Type) {
		if _, ok := m[t.String()]; ok {
			return
		}
		m[t.String()] = t
		switch t.Kind() {
		case reflect.Struct:
			for i := range t.NumField() {
				add(t.Field(i).Type)
			}
		case reflect.Map:
			add(t.Key())
			add(t.Elem())
		case reflect.Slice, reflect.Pointer:
			add(t.Elem())
		}
	}
	add(reflect.TypeFor[Config]())
	return m
}()

func yamlFields(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return kindName(t.Elem())
	case reflect.Struct, reflect.Map:
		return "a mapping"
	case reflect.Slice:
		return "a list"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "a " + t.String()
}
