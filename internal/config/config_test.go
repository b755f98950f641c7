package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/shaper-io/shaper/limiters"
)

// minimal is the smallest valid configuration.
const minimal = `
downstreams:
  - name: api
    rate: 50/s
    handler: {type: log}
`

func mustParse(t *testing.T, doc string) *Config {
	t.Helper()
	c, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return c
}

func TestLoadExample(t *testing.T) {
	t.Parallel()
	got, err := Load("testdata/example.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := &Config{
		Redis: Redis{
			URL:         "redis://127.0.0.1:6379/0",
			PasswordEnv: "SHAPER_REDIS_PASSWORD",
			Username:    "shaper",
			Prefix:      "shaper",
			Timeout:     Duration(2 * time.Second),
		},
		HTTP:            HTTP{Listen: "127.0.0.1:8080", TokenEnv: "SHAPER_TOKEN", MaxBody: 1 << 20},
		ShutdownTimeout: Duration(10 * time.Second),
		Downstreams: []Downstream{
			{
				Name:     "billing-api",
				Rate:     MustRate("50/s"),
				Burst:    1,
				MaxWait:  Duration(2 * time.Second),
				MaxHold:  Duration(DefaultMaxHold),
				Workers:  160,
				MaxRetry: 10, Retention: Duration(DefaultRetention),
				Handler: Handler{
					Type:    HandlerHTTP,
					URL:     "https://billing.internal/v1/charge",
					Method:  "POST",
					Headers: map[string]string{"Content-Type": "application/json"},
					Timeout: Duration(5 * time.Second),
				},
				ShapingMode: ModeEnforce,
				OnLate:      LateArchive,
				Admission: &Admission{
					OnReject:  Defer,
					Failure:   FailOpen,
					Prefilter: true,
					Limiters: []Limiter{
						{Name: "billing-tenant", Algorithm: limiters.TokenBucket, Key: KeyTenant, Rate: MustRate("10/s"), Burst: 20, Mode: ModeEnforce},
						{Name: "billing-api-1", Algorithm: limiters.FixedWindow, Key: KeyGlobal, Rate: MustRate("1000/m"), Mode: ModeEnforce},
					},
				},
			},
			{
				Name:     "legacy-db",
				Rate:     MustRate("3000/m"),
				Burst:    1,
				MaxWait:  Duration(time.Second),
				MaxHold:  Duration(DefaultMaxHold),
				Workers:  51, // ceil(50/s × 1s) + 1
				MaxRetry: 25, Retention: Duration(DefaultRetention),
				Handler:     Handler{Type: HandlerGo, Timeout: Duration(10 * time.Second)},
				ShapingMode: ModeEnforce, OnLate: LateArchive,
			},
			{
				Name:     "audit-log",
				Rate:     MustRate("2.5/s"),
				Burst:    1,
				Capacity: 10,
				MaxHold:  Duration(DefaultMaxHold),
				Workers:  11, // ceil(2.5/s × 4s) + 1
				MaxRetry: 0, Retention: Duration(DefaultRetention),
				Handler:     Handler{Type: HandlerLog, Timeout: Duration(10 * time.Second)},
				ShapingMode: ModeEnforce, OnLate: LateArchive,
			},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Load(example.yaml):\n got %+v\nwant %+v", got, want)
		for i := range min(len(got.Downstreams), len(want.Downstreams)) {
			if g, w := got.Downstreams[i], want.Downstreams[i]; !reflect.DeepEqual(g, w) {
				t.Errorf("downstreams[%d]:\n got %+v\nwant %+v", i, g, w)
			}
		}
	}

	// Derived values.
	for _, tt := range []struct {
		name      string
		limit     limiters.Limit
		maxWait   time.Duration
		wantLimit limiters.Limit
		wantWait  time.Duration
	}{
		{"billing-api", got.Downstreams[0].Limit(), got.Downstreams[0].MaxWaitDuration(), limiters.Limit{Rate: 50, Period: time.Second, Burst: 1}, 2 * time.Second},
		{"legacy-db", got.Downstreams[1].Limit(), got.Downstreams[1].MaxWaitDuration(), limiters.Limit{Rate: 3000, Period: time.Minute, Burst: 1}, time.Second},
		{"audit-log", got.Downstreams[2].Limit(), got.Downstreams[2].MaxWaitDuration(), limiters.Limit{Rate: 5, Period: 2 * time.Second, Burst: 1}, 4 * time.Second},
	} {
		if tt.limit != tt.wantLimit || tt.maxWait != tt.wantWait {
			t.Errorf("%s: Limit() = %v, MaxWaitDuration() = %v; want %v, %v", tt.name, tt.limit, tt.maxWait, tt.wantLimit, tt.wantWait)
		}
	}
	lims := got.Downstreams[0].Admission.Limiters
	if g, w := lims[0].Limit(), limiters.PerSecond(10).WithBurst(20); g != w {
		t.Errorf("limiters[0].Limit() = %v, want %v", g, w)
	}
	if g, w := lims[1].Limit(), limiters.PerMinute(1000); g != w {
		t.Errorf("limiters[1].Limit() = %v, want %v", g, w)
	}
	if g := got.Downstreams[0].Admission.Policy(); g != limiters.FailOpen {
		t.Errorf("Policy() = %v, want fail_open", g)
	}
	if got.Redis.Embedded() || !got.HTTP.Enabled() {
		t.Errorf("Embedded() = %v, Enabled() = %v; want false, true", got.Redis.Embedded(), got.HTTP.Enabled())
	}
	if d, ok := got.Downstream("legacy-db"); !ok || d.Name != "legacy-db" {
		t.Errorf("Downstream(legacy-db) = %v, %v", d.Name, ok)
	}
	if _, ok := got.Downstream("nope"); ok {
		t.Errorf("Downstream(nope) found")
	}
	if err := got.Validate(); err != nil {
		t.Errorf("Validate of a parsed config: %v", err)
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	c := mustParse(t, minimal)
	want := &Config{
		Redis:           Redis{Prefix: "shaper", Timeout: Duration(DefaultRedisTimeout)},
		HTTP:            HTTP{Listen: DefaultListen, MaxBody: DefaultMaxBody},
		ShutdownTimeout: Duration(DefaultShutdownTimeout),
		Downstreams: []Downstream{{
			Name: "api", Rate: MustRate("50/s"), Burst: 1, MaxWait: Duration(time.Second),
			MaxHold: Duration(DefaultMaxHold), Workers: 51, MaxRetry: 25, Retention: Duration(DefaultRetention),
			Handler:     Handler{Type: HandlerLog, Timeout: Duration(DefaultHandlerTimeout)},
			ShapingMode: ModeEnforce, OnLate: LateArchive,
		}},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got %+v\nwant %+v", c, want)
	}
	if !c.Redis.Embedded() {
		t.Errorf("Embedded() = false with no url, cluster or sentinel")
	}

	// Admission defaults.
	c = mustParse(t, `
downstreams:
  - name: api
    rate: 5/s
    handler: {type: http, url: "http://127.0.0.1:9000/x"}
    admission:
      limiters:
        - rate: 10/s
        - {name: floor, algorithm: sliding_counter, key: global, rate: 100/m, burst: 100}
`)
	d := c.Downstreams[0]
	if d.Handler.Method != "POST" {
		t.Errorf("method = %q, want POST", d.Handler.Method)
	}
	wantAdm := &Admission{OnReject: Reject, Failure: FailClosed, Limiters: []Limiter{
		{Name: "api-0", Algorithm: limiters.TokenBucket, Key: KeyTenant, Rate: MustRate("10/s"), Mode: ModeEnforce},
		{Name: "floor", Algorithm: limiters.SlidingCounter, Key: KeyGlobal, Rate: MustRate("100/m"), Burst: 100, Mode: ModeEnforce},
	}}
	if !reflect.DeepEqual(d.Admission, wantAdm) {
		t.Errorf("admission = %+v, want %+v", d.Admission, wantAdm)
	}
	if d.Admission.Policy() != limiters.FailClosed {
		t.Errorf("Policy() = %v, want fail_closed", d.Admission.Policy())
	}
}

// A field written with a zero value keeps it; a null counts as left out.
func TestExplicitValues(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `
redis: {timeout: ~, prefix: my.app-1}
http: {listen: "", max_body: 65536}
shutdown_timeout:
downstreams:
  - {name: a, rate: 1/s, max_retry: 0, workers: ~, handler: {type: log}}
  - {name: b, rate: 1/s, burst: 3, handler: {type: go, timeout: 1m}}
`)
	for _, tt := range []struct {
		what      string
		got, want any
	}{
		{"redis.timeout", c.Redis.Timeout, Duration(2 * time.Second)},
		{"redis.prefix", c.Redis.Prefix, "my.app-1"},
		{"http.listen", c.HTTP.Listen, ListenOff},
		{"http.Enabled()", c.HTTP.Enabled(), false},
		{"http.max_body", c.HTTP.MaxBody, ByteSize(64 << 10)},
		{"shutdown_timeout", c.ShutdownTimeout, Duration(10 * time.Second)},
		{"downstreams[0].max_retry", c.Downstreams[0].MaxRetry, 0},
		{"downstreams[0].workers", c.Downstreams[0].Workers, 2},
		{"downstreams[1].burst", c.Downstreams[1].Burst, int64(3)},
		{"downstreams[1].Limit()", c.Downstreams[1].Limit(), limiters.PerSecond(1).WithBurst(3)},
		{"downstreams[1].handler.timeout", c.Downstreams[1].Handler.Timeout, Duration(time.Minute)},
	} {
		if tt.got != tt.want {
			t.Errorf("%s = %v, want %v", tt.what, tt.got, tt.want)
		}
	}
}

func TestDefaultWorkers(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		doc  string
		want int
	}{
		{"rate: 50/s", 51}, // the bucket (50) + one call
		{"rate: 50/s\n    max_wait: 2s", 101},
		{"rate: 10/s\n    max_wait: 100ms", 2}, // exact: no float rounding up to 3
		{"rate: 1000/m", 18},                   // ceil(16.67/s × 1s) + 1
		{"rate: 1/h", 2},
		{"rate: 3/s\n    max_wait: 300ms", 2}, // ceil(0.9) + 1
		{"rate: 2.5/s\n    capacity: 10", 11},
		{"rate: 600/s", 601},
		{"rate: 2000/s", 1000}, // capped
		{"rate: 1000000/s\n    max_wait: 1h", 1000},
	} {
		doc := "downstreams:\n  - name: a\n    " + tt.doc + "\n    handler: {type: log}\n"
		c, err := Parse([]byte(doc))
		if err != nil {
			t.Errorf("%q: %v", tt.doc, err)
			continue
		}
		if got := c.Downstreams[0].Workers; got != tt.want {
			t.Errorf("%q: workers = %d, want %d", tt.doc, got, tt.want)
		}
	}
}

// Every bad configuration gives one line that names the field and the bad
// value, as an *Error that wraps ErrInvalid.
func TestBadConfigs(t *testing.T) {
	t.Parallel()
	// ds builds a document with one downstream whose body is lines.
	ds := func(lines string) string {
		return "downstreams:\n  - name: api\n" + indent(lines, "    ")
	}
	const logH = "handler: {type: log}\n"
	for _, tt := range []struct {
		name     string
		doc      string
		wantPath string
		wantLine int      // 0: not checked
		want     []string // substrings of the message
	}{
		{"unknown top-level field", "redis: {}\nworkerz: 3\n" + minimal, "workerz", 2, []string{`unknown field "workerz"`, "downstreams"}},
		{"unknown downstream field", ds("rate: 1/s\nworkerz: 5\n" + logH), "downstreams[0].workerz", 4, []string{`unknown field "workerz"`, "workers"}},
		{"unknown handler field in flow", ds("rate: 1/s\nhandler: {type: log, urll: x}\n"), "downstreams[0].handler.urll", 4, []string{`"urll"`}},
		{"bad rate", ds("rate: fast\n" + logH), "downstreams[0].rate", 3, []string{`invalid rate "fast" (want <number>/<unit>, e.g. 50/s)`}},
		{"negative concurrency", ds("rate: 5/s\nconcurrency: -1\n" + logH), "downstreams[0].concurrency", 0, []string{"must be 0 (no cap) to 100000, got -1"}},
		{"key cap above the cap", ds("rate: 5/s\nconcurrency: 2\nkey_concurrency: 3\n" + logH), "downstreams[0].key_concurrency", 0, []string{"3 is above concurrency 2"}},
		{"lease without a cap", ds("rate: 5/s\nlease: 5s\n" + logH), "downstreams[0].lease", 0, []string{"without concurrency or key_concurrency"}},
		{"fairness weight zero", ds("rate: 5/s\nfairness: {weights: {acme: 0}}\n" + logH), `downstreams[0].fairness.weights["acme"]`, 0, []string{"must be in (0, 1e+06], got 0"}},
		{"fairness key scope", ds("rate: 5/s\nfairness: {key: global}\n" + logH), "downstreams[0].fairness.key", 0, []string{`must be "tenant"`}},
		{"fairness key_rate above the rate", ds("rate: 5/s\nfairness: {key_rate: 10/s}\n" + logH), "downstreams[0].fairness.key_rate", 0, []string{`"10/s" is above the downstream's rate "5/s"`}},
		{"fairness key_rates above the rate", ds("rate: 5/s\nfairness: {key_rates: {vip: 10/s}}\n" + logH), `downstreams[0].fairness.key_rates["vip"]`, 0, []string{`"10/s" is above the downstream's rate "5/s"`}},
		{"fairness with batch", ds("rate: 5/s\nfairness: {}\nbatch: {max_rows: 10}\n" + logH), "downstreams[0].fairness", 0, []string{"cannot be combined with batch"}},
		{"lease too short", ds("rate: 5/s\nconcurrency: 2\nlease: 100ms\n" + logH), "downstreams[0].lease", 0, []string{"must be 1s to 1h0m0s, got 100ms"}},
		{"bad rate period", ds("rate: 5/fortnight\n" + logH), "downstreams[0].rate", 3, []string{`"5/fortnight"`, `unknown period "fortnight"`}},
		{"missing rate", ds(logH), "downstreams[0].rate", 0, []string{"required"}},
		{"zero workers", ds("rate: 1/s\nworkers: 0\n" + logH), "downstreams[0].workers", 4, []string{"got 0"}},
		{"negative workers", ds("rate: 1/s\nworkers: -3\n" + logH), "downstreams[0].workers", 4, []string{"got -3"}},
		{"too many workers", ds("rate: 1/s\nworkers: 10001\n" + logH), "downstreams[0].workers", 4, []string{"1-10000", "got 10001"}},
		{"workers not a number", ds("rate: 1/s\nworkers: many\n" + logH), "downstreams[0].workers", 4, []string{`invalid value "many" (want an integer)`}},
		{"zero burst", ds("rate: 1/s\nburst: 0\n" + logH), "downstreams[0].burst", 4, []string{"got 0"}},
		{"duplicate downstream", minimal + "  - {name: api, rate: 1/s, handler: {type: go}}\n", "downstreams[1].name", 6, []string{`duplicate name "api"`, "downstreams[0]"}},
		{"bad name chars", "downstreams:\n  - {name: billing api!, rate: 1/s, handler: {type: log}}\n", "downstreams[0].name", 2, []string{`"billing api!"`}},
		{"name too long", "downstreams:\n  - {name: " + strings.Repeat("x", 65) + ", rate: 1/s, handler: {type: log}}\n", "downstreams[0].name", 2, []string{strings.Repeat("x", 65)}},
		{"missing name", "downstreams:\n  - {rate: 1/s, handler: {type: log}}\n", "downstreams[0].name", 2, []string{"required"}},
		{"http handler without url", ds("rate: 1/s\nhandler: {type: http}\n"), "downstreams[0].handler.url", 4, []string{"required"}},
		{"http handler bad url scheme", ds("rate: 1/s\nhandler: {type: http, url: 'ftp://x/y'}\n"), "downstreams[0].handler.url", 4, []string{`"ftp://x/y"`}},
		{"http handler bad method", ds("rate: 1/s\nhandler: {type: http, url: 'http://x/', method: FETCH}\n"), "downstreams[0].handler.method", 4, []string{`"FETCH"`}},
		{"log handler with url", ds("rate: 1/s\nhandler: {type: log, url: 'http://x/'}\n"), "downstreams[0].handler.url", 4, []string{`type "log"`}},
		{"unknown handler type", ds("rate: 1/s\nhandler: {type: grpc}\n"), "downstreams[0].handler.type", 4, []string{`"grpc"`}},
		{"missing handler", ds("rate: 1/s\n"), "downstreams[0].handler.type", 0, []string{"required"}},
		{"bad header name", ds("rate: 1/s\nhandler: {type: http, url: 'http://x/', headers: {'Bad Header': v}}\n"), "downstreams[0].handler.headers.Bad Header", 4, []string{`"Bad Header"`}},
		{"handler timeout zero", ds("rate: 1/s\nhandler: {type: log, timeout: 0s}\n"), "downstreams[0].handler.timeout", 4, []string{"got 0s"}},
		{"max_wait and capacity", ds("rate: 1/s\nmax_wait: 2s\ncapacity: 5\n" + logH), "downstreams[0].capacity", 5, []string{"max_wait 2s", "5"}},
		{"negative max_wait", ds("rate: 1/s\nmax_wait: -1s\n" + logH), "downstreams[0].max_wait", 4, []string{"-1s"}},
		{"zero max_wait", ds("rate: 1/s\nmax_wait: 0s\n" + logH), "downstreams[0].max_wait", 4, []string{"got 0s"}},
		{"zero capacity", ds("rate: 1/s\ncapacity: 0\n" + logH), "downstreams[0].capacity", 4, []string{"got 0"}},
		{"bad max_retry", ds("rate: 1/s\nmax_retry: 1001\n" + logH), "downstreams[0].max_retry", 4, []string{"got 1001"}},
		{"bad collapse", ds("rate: 1/s\ncollapse: newest\n" + logH), "downstreams[0].collapse", 4, []string{`"newest"`, "keep_last or keep_first"}},
		{"collapse_window alone", ds("rate: 1/s\ncollapse_window: 1h\n" + logH), "downstreams[0].collapse_window", 4, []string{"only with collapse"}},
		{"collapse_window too long", ds("rate: 1/s\ncollapse: keep_last\ncollapse_window: 8d\n" + logH), "downstreams[0].collapse_window", 5, []string{"1s-7d"}},
		{"bad priority default", ds("rate: 1/s\npriority: {default: 6}\n" + logH), "downstreams[0].priority.default", 4, []string{"1 (first) to 5 (last)", "got 6"}},
		{"priority default off fair order", ds("rate: 1/s\nfairness: {}\npriority: {default: 5}\n" + logH), "downstreams[0].priority.default", 5, []string{"must be 3 with fairness", "got 5"}},
		{"priority with batch", ds("rate: 1/s\npriority: {}\nbatch: {max_rows: 10}\n" + logH), "downstreams[0].priority", 4, []string{"batch"}},
		{"cron priority without the downstream's", minimal + "cron: [{name: x, schedule: '@every 1s', downstream: api, priority: 1}]\n", "cron[0].priority", 0, []string{"1 needs downstream \"api\" to serve priorities"}},
		{"bad duration", ds("rate: 1/s\nmax_wait: 2 seconds\n" + logH), "downstreams[0].max_wait", 4, []string{`invalid duration "2 seconds"`}},
		{"duration without unit", "shutdown_timeout: 10\n" + minimal, "shutdown_timeout", 1, []string{`invalid duration "10"`}},
		{"bad max_body", "http: {max_body: 1MB}\n" + minimal, "http.max_body", 1, []string{`invalid size "1MB"`}},
		{"negative max_body", "http: {max_body: -5}\n" + minimal, "http.max_body", 1, []string{`"-5"`}},
		{"bad listen", "http: {listen: localhost}\n" + minimal, "http.listen", 1, []string{`"localhost"`}},
		{"bad token_env", "http: {token_env: 'MY-TOKEN'}\n" + minimal, "http.token_env", 1, []string{`"MY-TOKEN"`}},
		{"bad prefix", "redis: {prefix: 'my prefix'}\n" + minimal, "redis.prefix", 1, []string{`"my prefix"`}},
		{"bad redis scheme", "redis: {url: 'http://127.0.0.1:6379'}\n" + minimal, "redis.url", 1, []string{`unsupported scheme "http" (want redis:// or rediss://)`}},
		{"redis url without scheme", "redis: {url: '127.0.0.1:6379'}\n" + minimal, "redis.url", 1, []string{`"127.0.0.1:6379"`}},
		{"redis url bad port", "redis: {url: 'redis://127.0.0.1:99999'}\n" + minimal, "redis.url", 1, []string{`"99999"`}},
		{"redis url bad db", "redis: {url: 'redis://127.0.0.1/x'}\n" + minimal, "redis.url", 1, []string{`"x"`}},
		{"cluster and url", "redis:\n  url: redis://127.0.0.1:6379\n  cluster: [127.0.0.1:7000]\n" + minimal, "redis.cluster", 3, []string{"redis.url"}},
		{"cluster and sentinel", "redis:\n  cluster: [127.0.0.1:7000]\n  sentinel: {master: m, addrs: [127.0.0.1:26379]}\n" + minimal, "redis.sentinel", 3, []string{"redis.cluster"}},
		{"bad cluster addr", "redis: {cluster: [127.0.0.1:7000, nohost]}\n" + minimal, "redis.cluster[1]", 1, []string{`"nohost"`}},
		{"sentinel without master", "redis: {sentinel: {addrs: [127.0.0.1:26379]}}\n" + minimal, "redis.sentinel.master", 1, []string{"required"}},
		{"password env and file", "redis: {url: 'redis://h', password_env: P, password_file: /f}\n" + minimal, "redis.password_file", 1, []string{`"/f"`, `"P"`}},
		{"bad password_env name", "redis: {url: 'redis://h', password_env: 'a b'}\n" + minimal, "redis.password_env", 1, []string{`"a b"`}},
		{"password with embedded redis", "redis: {password_env: SHAPER_REDIS_PASSWORD}\n" + minimal, "redis.password_env", 1, []string{`"SHAPER_REDIS_PASSWORD"`, "redis.url"}},
		{"tls_ca_file without rediss", "redis: {url: 'redis://h', tls_ca_file: /ca.pem}\n" + minimal, "redis.tls_ca_file", 1, []string{`"/ca.pem"`, "rediss://"}},
		{"zero redis timeout", "redis: {timeout: 0s}\n" + minimal, "redis.timeout", 1, []string{"got 0s"}},
		{"no downstreams", "redis: {prefix: x}\n", "downstreams", 0, []string{"at least one"}},
		{"empty document", "", "downstreams", 0, []string{"at least one"}},
		{"downstreams not a list", "downstreams: api\n", "downstreams", 1, []string{`invalid value "api" (want a list)`}},
		{"rate is a mapping", ds("rate:\n  count: 5\n" + logH), "downstreams[0].rate", 4, []string{"got a mapping, want a string"}},
		{"duplicate key", ds("rate: 1/s\nrate: 2/s\n" + logH), "downstreams[0].rate", 4, []string{`duplicate key "rate" (first at line 3)`}},
		{"bad on_reject", ds("rate: 1/s\n" + logH + "admission: {on_reject: drop, limiters: [{rate: 1/s}]}\n"), "downstreams[0].admission.on_reject", 5, []string{`"drop"`}},
		{"bad failure", ds("rate: 1/s\n" + logH + "admission: {failure: open, limiters: [{rate: 1/s}]}\n"), "downstreams[0].admission.failure", 5, []string{`"open"`}},
		{"admission without limiters", ds("rate: 1/s\n" + logH + "admission: {on_reject: defer}\n"), "downstreams[0].admission.limiters", 5, []string{"at least one"}},
		{"bad algorithm", ds("rate: 1/s\n" + logH + "admission:\n  limiters:\n    - {algorithm: leaky, rate: 1/s}\n"), "downstreams[0].admission.limiters[0].algorithm", 7, []string{`"leaky"`}},
		{"bad limiter key", ds("rate: 1/s\n" + logH + "admission:\n  limiters:\n    - {key: user, rate: 1/s}\n"), "downstreams[0].admission.limiters[0].key", 7, []string{`"user"`}},
		{"bad limiter rate", ds("rate: 1/s\n" + logH + "admission:\n  limiters:\n    - {rate: 0/s}\n"), "downstreams[0].admission.limiters[0].rate", 7, []string{`"0/s"`}},
		{"window limiter burst", ds("rate: 1/s\n" + logH + "admission:\n  limiters:\n    - {algorithm: fixed_window, rate: 100/m, burst: 150}\n"), "downstreams[0].admission.limiters[0].burst", 7, []string{"100", "got 150"}},
		{"duplicate limiter", ds("rate: 1/s\n" + logH + "admission:\n  limiters:\n    - {name: x, rate: 1/s}\n    - {name: x, rate: 1/s}\n"), "downstreams[0].admission.limiters[1].name", 8, []string{`duplicate name "x"`}},
		{"shared limiter name, other limit", minimal + "    admission: {limiters: [{name: t, rate: 1/s}]}\n  - name: b\n    rate: 1/s\n    handler: {type: log}\n    admission: {limiters: [{name: t, rate: 2/s}]}\n",
			"downstreams[1].admission.limiters[0].name", 10, []string{`"t"`, "downstreams[0].admission.limiters[0]"}},
		{"limiter burst zero", ds("rate: 1/s\n" + logH + "admission:\n  limiters:\n    - {rate: 5/s, burst: 0}\n"), "downstreams[0].admission.limiters[0].burst", 7, []string{"got 0", "leave burst out"}},
		{"limiter burst negative", ds("rate: 1/s\n" + logH + "admission:\n  limiters:\n    - {rate: 5/s, burst: -1}\n"), "downstreams[0].admission.limiters[0].burst", 7, []string{"got -1"}},
		{"http handler url without host", ds("rate: 1/s\nhandler: {type: http, url: 'http://:80/x'}\n"), "downstreams[0].handler.url", 4, []string{`"http://:80/x" has no host`}},
		{"name dot dot", "downstreams:\n  - {name: '..', rate: 1/s, handler: {type: log}}\n", "downstreams[0].name", 2, []string{`".."`}},
		{"name dot", "downstreams:\n  - {name: '.', rate: 1/s, handler: {type: log}}\n", "downstreams[0].name", 2, []string{`"."`}},
		{"max_wait too long", ds("rate: 1/s\nmax_wait: 100000h\n" + logH), "downstreams[0].max_wait", 4, []string{"at most 1h0m0s", "got 100000h0m0s"}},
		{"capacity too long a wait", ds("rate: 1/s\ncapacity: 100000\n" + logH), "downstreams[0].capacity", 4, []string{"100000", `"1/s"`, "at most 1h0m0s"}},
		{"max_body too big", "http: {max_body: 100000MiB}\n" + minimal, "http.max_body", 1, []string{"at most 64MiB", "100000MiB"}},
		{"listen on all interfaces without token", "http: {listen: '0.0.0.0:8080'}\n" + minimal, "http.listen", 1, []string{`"0.0.0.0:8080"`, "token_env", "allow_unauthenticated"}},
		{"listen without host without token", "http: {listen: ':8080'}\n" + minimal, "http.listen", 1, []string{`":8080"`, "token_env"}},
		{"rate with exponent", ds("rate: 1e309/s\n" + logH), "downstreams[0].rate", 3, []string{`invalid rate "1e309/s": exponents are not supported`}},
		{"rate period under 1us", ds("rate: 1/100ns\n" + logH), "downstreams[0].rate", 3, []string{`invalid rate "1/100ns": the period must be at least 1µs`}},
		{"burst too large, in the file's words", ds("rate: 1/s\nburst: 10000000000000\n" + logH), "downstreams[0].burst", 4, []string{"burst 10000000000000 over the rate's period 1s is too large"}},
		{"yaml syntax", "downstreams:\n  - name: a\n    rate: 1/s: x\n", "", 3, []string{"line 3", "mapping values are not allowed"}},
		{"tab indentation", "downstreams:\n\t- name: a\n", "", 2, []string{"line 2"}},
		{"second document", minimal + "---\nredis: {}\n", "", 6, []string{"more than one YAML document"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse([]byte(tt.doc))
			if err == nil {
				t.Fatalf("Parse succeeded (%+v), want an error about %s", c, tt.wantPath)
			}
			msg := err.Error()
			t.Log(msg)
			if strings.ContainsAny(msg, "\r\n") {
				t.Errorf("error is not one line: %q", msg)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T is not an *Error", err)
			}
			if e.Path != tt.wantPath {
				t.Errorf("Path = %q, want %q (error: %s)", e.Path, tt.wantPath, msg)
			}
			if tt.wantLine != 0 && e.Line != tt.wantLine {
				t.Errorf("Line = %d, want %d (error: %s)", e.Line, tt.wantLine, msg)
			}
			if !strings.HasPrefix(msg, "config: ") {
				t.Errorf("error %q does not start with \"config: \"", msg)
			}
			for _, w := range append([]string{tt.wantPath}, tt.want...) {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
		})
	}
}

// The edges of the rules TestBadConfigs holds are accepted.
func TestBoundsAccepted(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{
		"http: {listen: '0.0.0.0:8080', allow_unauthenticated: true}\n" + minimal,
		"http: {listen: '0.0.0.0:8080', token_env: SHAPER_TOKEN}\n" + minimal,
		"http: {listen: 'localhost:8080'}\n" + minimal,
		"http: {listen: '[::1]:8080', max_body: 64MiB}\n" + minimal,
		"downstreams:\n  - {name: a.b, rate: 1/s, max_wait: 1h, handler: {type: log}}\n",
		"downstreams:\n  - {name: a, rate: 1/s, capacity: 3600, handler: {type: log}}\n",
		"downstreams:\n  - {name: a, rate: 1/s, handler: {type: log}, admission: {limiters: [{rate: 5/s}]}}\n",
		"downstreams:\n  - {name: a, rate: 1/s, handler: {type: log}}\ncron: [{name: x, schedule: '@every 1s', downstream: a}, {name: y, schedule: '0 0 29 2 *', downstream: a}]\n",
	} {
		if _, err := Parse([]byte(doc)); err != nil {
			t.Errorf("Parse(%q): %v, want it accepted", doc, err)
		}
	}
}

func indent(s, prefix string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "")
}

func TestErrorFormat(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte("downstreams:\n  - name: api\n    rate: 5/s\n    handler: {type: log}\n  - name: b\n    rate: fast\n    handler: {type: log}\n"))
	want := `config: line 6: downstreams[1].rate: invalid rate "fast" (want <number>/<unit>, e.g. 50/s)`
	if err == nil || err.Error() != want {
		t.Errorf("Parse error = %v\nwant %s", err, want)
	}

	// Load names the file.
	path := filepath.Join(t.TempDir(), "shaper.yaml")
	if err := os.WriteFile(path, []byte(minimal+"  - {name: api, rate: 1/s, handler: {type: log}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(path)
	want = "config: " + path + `:6: downstreams[1].name: duplicate name "api" (first at downstreams[0])`
	if err == nil || err.Error() != want {
		t.Errorf("Load error = %v\nwant %s", err, want)
	}

	// A missing file is not ErrInvalid, and says which file.
	_, err = Load(filepath.Join(t.TempDir(), "missing.yaml"))
	if err == nil || errors.Is(err, ErrInvalid) || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("Load(missing) = %v, want a not-exist error naming the file", err)
	}

	// Validate on a config built in code: no line.
	c := mustParse(t, minimal)
	c.Downstreams[0].Rate, _ = ParseRate("fast")
	want = `config: downstreams[0].rate: invalid rate "fast" (want <number>/<unit>, e.g. 50/s)`
	if err := c.Validate(); err == nil || err.Error() != want {
		t.Errorf("Validate = %v\nwant %s", err, want)
	}

	// More decoding errors are counted, still on one line.
	_, err = Parse([]byte("foo: 1\nbar: 2\nbaz: 3\n"))
	if err == nil || !strings.Contains(err.Error(), `unknown field "foo"`) || !strings.Contains(err.Error(), "(and 2 more errors)") {
		t.Errorf("Parse = %v, want the first unknown field and a count of the rest", err)
	}
}

func TestValidateInCode(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"both max_wait and capacity", func(c *Config) { c.Downstreams[0].Capacity = 3 }, "downstreams[0].capacity: 3 set together with max_wait 1s"},
		{"neither max_wait nor capacity", func(c *Config) { c.Downstreams[0].MaxWait = 0 }, "downstreams[0].max_wait: must be positive, got 0s"},
		{"zero workers", func(c *Config) { c.Downstreams[0].Workers = 0 }, "downstreams[0].workers: must be 1-10000, got 0"},
		{"zero shutdown", func(c *Config) { c.ShutdownTimeout = 0 }, "shutdown_timeout: must be positive, got 0s"},
		{"url with password", func(c *Config) { c.Redis.URL = "redis://u:hunter2@h:6379/0" }, `redis.url: "redis://u:xxxxx@h:6379/0" contains a password`},
		{"no downstreams", func(c *Config) { c.Downstreams = nil }, "downstreams: at least one downstream is required"},
	} {
		c := mustParse(t, minimal)
		tt.mutate(c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Validate = %v, want %q", tt.name, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: error leaks the password: %v", tt.name, err)
		}
	}
}

func TestRedisString(t *testing.T) {
	t.Setenv("SHAPER_TEST_PW", "hunter2")
	for _, tt := range []struct {
		r    Redis
		want string
	}{
		{Redis{URL: "redis://app@10.0.0.5:6379/0", PasswordEnv: "SHAPER_TEST_PW", Prefix: "shaper", Timeout: Duration(2 * time.Second)},
			"redis://app@10.0.0.5:6379/0 password=env:SHAPER_TEST_PW prefix=shaper timeout=2s"},
		{Redis{URL: "rediss://u:hunter2@h:6380", Username: "u", TLSCAFile: "/ca.pem", Prefix: "p", Timeout: Duration(time.Second)},
			"rediss://u:xxxxx@h:6380 user=u ca=/ca.pem prefix=p timeout=1s"},
		{Redis{URL: "redis://u:hunter2@h:bad port", Prefix: "p"}, "redis://xxxxx@h:bad port prefix=p timeout=0s"},
		{Redis{Cluster: []string{"a:1", "b:2"}, PasswordFile: "/run/pw", Prefix: "p"}, "cluster a:1,b:2 password=file:/run/pw prefix=p timeout=0s"},
		{Redis{Sentinel: &Sentinel{Master: "m", Addrs: []string{"s:26379"}}, Prefix: "p"}, "sentinel m@s:26379 prefix=p timeout=0s"},
		{Redis{Prefix: "shaper"}, "embedded prefix=shaper timeout=0s"},
	} {
		if got := tt.r.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
		for _, s := range []string{tt.r.String(), fmtV(tt.r), fmtV(Config{Redis: tt.r})} {
			if strings.Contains(s, "hunter2") {
				t.Errorf("%q leaks the password", s)
			}
		}
	}
}

func fmtV(v any) string { return fmt.Sprintf("%v %+v", v, v) }

func TestDurationAndSize(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want Duration
		ok   bool
	}{
		{"2s", Duration(2 * time.Second), true},
		{"1m30s", Duration(90 * time.Second), true},
		{"500ms", Duration(500 * time.Millisecond), true},
		{"-1s", Duration(-time.Second), true}, // Validate rejects it where it must be positive
		{"2", 0, false},
		{"soon", 0, false},
		{"[1s]", 0, false},
	} {
		var v struct{ D Duration }
		err := yaml.Unmarshal([]byte("d: "+tt.in), &v)
		if (err == nil) != tt.ok || v.D != tt.want {
			t.Errorf("Duration %q = %v, %v; want %v, ok %v", tt.in, v.D, err, tt.want, tt.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "invalid duration") {
			t.Errorf("Duration %q: error %v does not say invalid duration", tt.in, err)
		}
	}
	for _, tt := range []struct {
		in   string
		want ByteSize
		ok   bool
	}{
		{"1MiB", 1 << 20, true},
		{"64KiB", 64 << 10, true},
		{"100B", 100, true},
		{"4096", 4096, true},
		{"2 MiB", 2 << 20, true},
		{"1MB", 0, false},
		{"1.5MiB", 0, false},
		{"-1", 0, false},
		{"9223372036854775807MiB", 0, false},
		{"lots", 0, false},
	} {
		var v struct{ S ByteSize }
		err := yaml.Unmarshal([]byte("s: "+tt.in), &v)
		if (err == nil) != tt.ok || v.S != tt.want {
			t.Errorf("ByteSize %q = %v, %v; want %v, ok %v", tt.in, v.S, err, tt.want, tt.ok)
		}
	}
	for _, tt := range []struct {
		s    ByteSize
		want string
	}{{1 << 20, "1MiB"}, {3 << 10, "3KiB"}, {1536, "1536B"}, {0, "0B"}} {
		if got := tt.s.String(); got != tt.want {
			t.Errorf("ByteSize(%d).String() = %q, want %q", int64(tt.s), got, tt.want)
		}
	}
}

// A parsed config written back out parses to the same config: defaults are
// stable and Duration and ByteSize round-trip.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	c, err := Load("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := Parse(out)
	if err != nil {
		t.Fatalf("Parse(Marshal(example)): %v\n%s", err, out)
	}
	if !reflect.DeepEqual(c, c2) {
		t.Errorf("round trip changed the config:\n got %+v\nwant %+v\n%s", c2, c, out)
	}
}

// Anchors and merge keys work, and a merged field counts as set.
func TestAnchors(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `
downstreams:
  - &base
    name: a
    rate: 10/s
    max_retry: 0
    handler: &h {type: http, url: "http://127.0.0.1:9000/x", timeout: 3s}
  - <<: *base
    name: b
    handler: *h
`)
	b := c.Downstreams[1]
	if b.Name != "b" || b.MaxRetry != 0 || b.Handler.Timeout != Duration(3*time.Second) || b.Handler.Method != "POST" {
		t.Errorf("downstreams[1] = %+v", b)
	}
	_, err := Parse([]byte(`
downstreams:
  - &base {name: a, rate: 10/s, handler: {type: log}, workers: 0}
  - {<<: *base, name: b}
`))
	if err == nil || !strings.Contains(err.Error(), "downstreams[0].workers: must be 1-10000, got 0") {
		t.Errorf("Parse = %v, want the explicit zero workers reported", err)
	}
}
