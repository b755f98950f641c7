package config

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shaper-io/shaper/internal/fairindex"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/priority"
	"github.com/shaper-io/shaper/internal/sizing"
	"github.com/shaper-io/shaper/limiters"
)

var (
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

// maxRetention bounds how long a completed task is kept.
const maxRetention = 7 * 24 * time.Hour

func (d *Downstream) validate(p string) *Error {
	if msg := keys.CheckName(d.Name); msg != "" {
		return errf(p+".name", "%s", msg)
	}
	if d.Rate.IsZero() {
		return errf(p+".rate", "required (e.g. 50/s)")
	}
	if e := checkRate(p+".rate", d.Rate); e != nil {
		return e
	}
	if d.Burst < 1 {
		return errf(p+".burst", "must be at least 1, got %d", d.Burst)
	}
	if err := d.Limit().Validate(); err != nil {
		return errf(p+".burst", "burst %d with rate %s: %s", d.Burst, q(d.Rate.String()), limitMsg(err))
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
	case d.Capacity > 0 && (d.MaxWaitDuration() > sizing.MaxMaxWait || d.MaxWaitDuration() <= 0):
		return errf(p+".capacity", "%d at rate %s is more than %s of waiting (at most %s)", d.Capacity, q(d.Rate.String()), sizing.MaxMaxWait, sizing.MaxMaxWait)
	}
	if d.MaxCost < 0 {
		return errf(p+".max_cost", "must be at least 1, got %d", d.MaxCost)
	}
	if pr := sizing.CheckWaits(time.Duration(d.MaxWait), time.Duration(d.MaxHold)); pr != nil {
		return errf(p+"."+pr.Field, "%s", pr.Msg)
	}
	if rh := d.RateHeaders; rh != nil {
		if _, err := rh.Mapping(); err != nil {
			return errf(p+".rate_headers", "%v", err)
		}
	}
	if e := d.validateConcurrency(p); e != nil {
		return e
	}
	if e := d.validateFairness(p); e != nil {
		return e
	}
	switch d.Collapse {
	case "", CollapseKeepLast, CollapseKeepFirst:
	default:
		return errf(p+".collapse", "unknown mode %s (want keep_last or keep_first)", q(string(d.Collapse)))
	}
	if w := time.Duration(d.CollapseWindow); w != 0 && (d.Collapse == "" || w < time.Second || w > 7*24*time.Hour) {
		if d.Collapse == "" {
			return errf(p+".collapse_window", "only with collapse")
		}
		return errf(p+".collapse_window", "must be 1s-7d, got %s", d.CollapseWindow)
	}
	if pr := d.Priority; pr != nil {
		if e := pr.validate(p + ".priority"); e != nil {
			return e
		}
		if d.Batch != nil {
			return errf(p+".priority", "cannot be combined with batch (a batch is served by asynq's server, which knows no priority)")
		}
		if d.Fairness != nil && pr.Default != 0 && pr.Default != priority.Default {
			// fair order is kept at priority 3 only: another default
			// would quietly take every task that names none out of it
			return errf(p+".priority.default", "must be %d with fairness (fair share orders the tasks of priority %d; the others go first in, first out, whatever their keys), got %d",
				priority.Default, priority.Default, pr.Default)
		}
	}
	if d.Workers < 1 {
		return errf(p+".workers", "must be 1-%d, got %d", sizing.MaxWorkers, d.Workers)
	}
	if d.MaxRetry < 0 || d.MaxRetry > maxRetryLimit {
		return errf(p+".max_retry", "must be 0-%d, got %d", maxRetryLimit, d.MaxRetry)
	}
	if d.Retention < 0 || time.Duration(d.Retention) > maxRetention {
		return errf(p+".retention", "must be 0 (keep none) to %s, got %s", maxRetention, d.Retention)
	}
	if e := d.validateBatch(p); e != nil {
		return e
	}
	if e := d.validateBreaker(p); e != nil {
		return e
	}
	if e := d.validateQuotas(p); e != nil {
		return e
	}
	if e := d.checkRelease(p+".rate", d.Rate); e != nil {
		if d.MaxCost == 0 {
			return e
		}
		cost := strconv.FormatInt(d.MaxCost, 10) // the file's max_cost, rather than its rate, is what to change
		if rows := d.batchRows(); rows > 1 {
			cost += fmt.Sprintf(" (× %d rows of a batch)", rows)
		}
		return errf(p+".max_cost", "%s at rate %s would hold the downstream for %s, over the limit of %s", cost, q(d.Rate.String()),
			d.Limit().Interval(d.MaxReleaseCost()).Round(time.Second), sizing.MaxInterval)
	}
	if e := d.validateRollout(p); e != nil {
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

// validate checks the priority setting at path p: its default and each
// weight, naming the level (p.weights[6]).
func (pr *Priority) validate(p string) *Error {
	if err := priority.Validate(pr.Default); err != nil {
		return errf(p+".default", "%v", err)
	}
	for _, lv := range slices.Sorted(maps.Keys(pr.Weights)) {
		if err := priority.CheckWeight(lv, pr.Weights[lv]); err != nil {
			return errf(fmt.Sprintf("%s.weights[%d]", p, lv), "%v", err)
		}
	}
	return nil
}

// checkRelease reports a rate the downstream could not run at: its
// largest release would hold it for longer than one reservation may
// (sizing.CheckRate, the rule the dispatcher applies to every rate, and
// to runtime overrides), so every task that costs that much would be
// archived instead of waiting.
func (d *Downstream) checkRelease(path string, r Rate) *Error {
	var se *sizing.SlowRateError
	if !errors.As(sizing.CheckRate(r.Limit(), d.MaxReleaseCost()), &se) {
		return nil
	}
	cost := fmt.Sprintf("max_cost %d", cmp.Or(d.MaxCost, d.DefaultMaxCost()))
	if d.MaxCost == 0 {
		cost += ", its default"
	}
	if rows := d.batchRows(); rows > 1 {
		cost += fmt.Sprintf(", × %d rows of a batch", rows)
	}
	return errf(path, "%s is too slow for the largest release (%s): it would hold the downstream for %s, over the limit of %s (such tasks would be archived, not wait)",
		q(r.String()), cost, se.Hold.Round(time.Second), sizing.MaxInterval)
}

// checkRate reports a rate that limiters.ParseLimit rejected, in its words.
func checkRate(path string, r Rate) *Error {
	if r.err != nil {
		return errf(path, "%s", limitMsg(r.err))
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
		if err := h.onlyFor(p, HandlerHTTP, h.httpFields()); err != nil {
			return err
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
	if l.Rate.IsZero() {
		return errf(p+".rate", "required (e.g. 10/s)")
	}
	if e := checkRate(p+".rate", l.Rate); e != nil {
		return e
	}
	lim := l.Limit()
	switch l.Algorithm {
	case limiters.FixedWindow, limiters.SlidingLog, limiters.SlidingCounter:
		if l.Burst != 0 && l.Burst != lim.Rate {
			return errf(p+".burst", "%s counts the rate per window, so burst must be left out or equal %d (the count of rate %s), got %d", l.Algorithm, lim.Rate, q(l.Rate.String()), l.Burst)
		}
	}
	if l.Burst < 0 {
		return errf(p+".burst", "must be at least 1, got %d", l.Burst)
	}
	if err := lim.Validate(); err != nil {
		return errf(p+".burst", "burst %d with rate %s: %s", lim.Capacity(), q(l.Rate.String()), limitMsg(err))
	}
	if err := limiters.CheckSubWindows(l.Algorithm, lim, l.SubWindows); err != nil {
		return errf(p+".sub_windows", "%s", limitMsg(err))
	}
	return nil
}

// validateConcurrency applies the one rule for workers and caps on calls
// (sizing.CheckCalls) at its YAML path.
func (d *Downstream) validateConcurrency(p string) *Error {
	if pr := sizing.CheckCalls(d.Workers, d.Concurrency, d.KeyConcurrency, time.Duration(d.Lease)); pr != nil {
		return errf(p+"."+pr.Field, "%s", pr.Msg)
	}
	return nil
}

// validateFairness checks the file's words (key, the rates as written,
// batch) and then the one rule for a fair share (fairindex.Check), named
// at its YAML path.
func (d *Downstream) validateFairness(p string) *Error {
	f := d.Fairness
	if f == nil {
		return nil
	}
	p += ".fairness"
	switch {
	case f.Key != "" && f.Key != KeyTenant:
		return errf(p+".key", "must be %q (the task's key), got %q", KeyTenant, f.Key)
	case d.Batch != nil:
		return errf(p, "cannot be combined with batch (a batch mixes keys)")
	}
	if e := checkRate(p+".key_rate", f.KeyRate); e != nil {
		return e
	}
	for _, k := range slices.Sorted(maps.Keys(f.KeyRates)) {
		if e := checkRate(fmt.Sprintf("%s.key_rates[%q]", p, k), f.KeyRates[k]); e != nil {
			return e
		}
	}
	if pr := f.Model().Check(d.Limit()); pr != nil {
		return errf(p+"."+pr.Field, "%s", pr.Msg)
	}
	return nil
}

// Model is f as the dispatcher and the producer take it (nil when f is).
func (f *Fairness) Model() *fairindex.Fairness {
	if f == nil {
		return nil
	}
	var rates map[string]limiters.Limit
	for k, r := range f.KeyRates {
		if rates == nil {
			rates = map[string]limiters.Limit{}
		}
		rates[k] = r.Limit()
	}
	return &fairindex.Fairness{Weights: f.Weights, DefaultWeight: f.DefaultWeight, KeyRate: f.KeyRate.Limit(), KeyRates: rates}
}
