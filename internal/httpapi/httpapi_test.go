package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/explain"
	"github.com/shaper-io/shaper/internal/httpapi"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/server"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
)

func TestMain(m *testing.M) { redistest.Main(m) }

type bundle struct {
	rdb    redis.UniversalClient
	prefix string
	in     *queue.Inspector
	base   string // http://host:port
	token  string
}

type options struct {
	rdb        redis.UniversalClient // nil: the shared test Redis
	token      string
	maxBody    int64
	maxPayload int
	admission  func(b *bundle) map[string]queue.Admission
	shaping    map[string]queue.Shaping
	priority   map[string]int // queue.ProducerConfig.Priority
	collapse   map[string]queue.Collapse
	fair       map[string]queue.FairShare
}

func setup(t *testing.T, o options) *bundle {
	t.Helper()
	b := &bundle{rdb: o.rdb, prefix: redistest.Prefix(t), token: o.token}
	if b.rdb == nil {
		b.rdb = redistest.Client(t)
	}
	b.in = queue.NewInspector(b.rdb, b.prefix)
	var adm map[string]queue.Admission
	if o.admission != nil {
		adm = o.admission(b)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	names := []string{"api", "global", "deferred", "open", "closed"}
	p := queue.NewProducer(b.rdb, queue.ProducerConfig{Prefix: b.prefix, Admission: adm, MaxPayload: o.maxPayload,
		Downstreams: names, Logger: quiet, Shaping: o.shaping, Predict: o.shaping != nil, Priority: o.priority,
		Collapse: o.collapse, Fair: o.fair})
	srv := server.New(server.Options{Addr: "127.0.0.1:0", Token: o.token, Redis: b.rdb, Logger: quiet})
	explainTask := func(ctx context.Context, ds, id string) (explain.Explanation, error) {
		return explain.Task(ctx, b.in, b.rdb, b.prefix, ds, id, time.Now())
	}
	httpapi.New(httpapi.Config{Producer: p, Inspector: b.in, MaxBody: o.maxBody, Logger: quiet, Explain: explainTask, Downstreams: names}).Mount(srv)
	addr, err := srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		p.Close()
		b.in.Asynq().Close()
	})
	b.base = "http://" + addr
	return b
}

func (b *bundle) limiter(t *testing.T, name string, alg limiters.Algorithm, l limiters.Limit) *limiters.Redis {
	t.Helper()
	lim, err := limiters.New(b.rdb, limiters.Config{Name: name, Algorithm: alg, Limit: l, Prefix: b.prefix})
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

type response struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func (b *bundle) do(t *testing.T, method, path string, body io.Reader, hdr ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, b.base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if b.token != "" {
		req.Header.Set("Authorization", "Bearer "+b.token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	r := response{status: res.StatusCode, header: res.Header, raw: string(raw)}
	if err := json.Unmarshal(raw, &r.body); err != nil {
		t.Fatalf("%s %s: %d with a body that is not a JSON object: %q", method, path, res.StatusCode, raw)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q, want application/json", method, path, ct)
	}
	return r
}

func (b *bundle) post(t *testing.T, path, body string, hdr ...string) response {
	t.Helper()
	return b.do(t, "POST", path, strings.NewReader(body), hdr...)
}

func (b *bundle) total(t *testing.T, ds string) int {
	t.Helper()
	bl, err := b.in.Backlog(ds)
	if err != nil && strings.Contains(err.Error(), "does not exist") {
		return 0 // a queue never written to (asynq does not wrap ErrQueueNotFound here)
	}
	if err != nil {
		t.Fatal(err)
	}
	return bl.Total()
}

func headerInt(t *testing.T, h http.Header, name string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(h.Get(name), 10, 64)
	if err != nil {
		t.Fatalf("header %s = %q, want an integer", name, h.Get(name))
	}
	return v
}

// A 202 carries the id, a Location that serves the task's state, and the
// RateLimit headers of the admission decision.
func TestAccepted(t *testing.T) {
	t.Parallel()
	var lim *limiters.Redis
	b := setup(t, options{admission: func(b *bundle) map[string]queue.Admission {
		// 5 tokens, one back every 12 minutes.
		lim = b.limiter(t, "tenant", limiters.TokenBucket, limiters.PerHour(5))
		return map[string]queue.Admission{"api": {Limiter: lim}}
	}})
	for i := range 5 {
		r := b.post(t, "/v1/downstreams/api/tasks", fmt.Sprintf(`{"payload":{"n":%d},"key":"t1","type":"charge"}`, i))
		if r.status != http.StatusAccepted {
			t.Fatalf("task %d: %d %s, want 202", i, r.status, r.raw)
		}
		id, _ := r.body["id"].(string)
		loc := r.header.Get("Location")
		if id == "" || loc != "/v1/downstreams/api/tasks/"+id || r.body["location"] != loc {
			t.Errorf("task %d: id %q, Location %q, body %s", i, id, loc, r.raw)
		}
		if r.body["state"] != "pending" || r.body["deferred"] != false || r.body["queue"] != b.prefix+":api" {
			t.Errorf("task %d: body %s, want pending, not deferred, queue %s", i, r.raw, b.prefix+":api")
		}
		h := r.header
		remaining := int64(4 - i)
		// After k charges the bucket is full again k×12 minutes later.
		reset := int64((i + 1) * 720)
		if got := h.Get("RateLimit-Policy"); got != `"tenant";q=5;w=3600` {
			t.Errorf("task %d: RateLimit-Policy %q, want \"tenant\";q=5;w=3600", i, got)
		}
		if got, want := h.Get("RateLimit"), fmt.Sprintf(`"tenant";r=%d;t=%d`, remaining, reset); got != want {
			t.Errorf("task %d: RateLimit %q, want %q", i, got, want)
		}
		if headerInt(t, h, "X-RateLimit-Limit") != 5 || headerInt(t, h, "X-RateLimit-Remaining") != remaining ||
			headerInt(t, h, "X-RateLimit-Reset") != reset {
			t.Errorf("task %d: X-RateLimit-* = %s/%s/%s, want 5/%d/%d", i, h.Get("X-RateLimit-Limit"),
				h.Get("X-RateLimit-Remaining"), h.Get("X-RateLimit-Reset"), remaining, reset)
		}
		if h.Get("Retry-After") != "" {
			t.Errorf("task %d: Retry-After %q on a 202", i, h.Get("Retry-After"))
		}
		if i == 0 {
			st := b.do(t, "GET", loc, nil)
			if st.status != 200 || st.body["id"] != id || st.body["state"] != "pending" || st.body["type"] != "charge" ||
				st.body["key"] != "t1" || st.body["cost"] != 1.0 || st.body["payload_bytes"] != 7.0 || st.body["max_retry"] != 25.0 {
				t.Errorf("GET %s: %d %s", loc, st.status, st.raw)
			}
		}
	}
	if r := b.do(t, "GET", "/v1/downstreams/api/tasks/nope", nil); r.status != 404 {
		t.Errorf("GET unknown task: %d %s, want 404", r.status, r.raw)
	}
	// The same task object, with its downstream, at /v1/tasks.
	r := b.post(t, "/v1/tasks", `{"downstream":"global","payload":"x"}`)
	if r.status != 202 || r.body["downstream"] != "global" || r.header.Get("RateLimit") != "" {
		t.Errorf("/v1/tasks: %d %s (RateLimit %q), want 202 without RateLimit headers (no admission)", r.status, r.raw, r.header.Get("RateLimit"))
	}
	if n := b.total(t, "api"); n != 5 {
		t.Errorf("%d tasks in api, want 5", n)
	}
}

// A 429's Retry-After and RateLimit headers agree with the limiter's own
// state, for a token bucket and for a fixed window.
func TestRejectedHeadersMatchLimiter(t *testing.T) {
	t.Parallel()
	var bucket, window *limiters.Redis
	b := setup(t, options{admission: func(b *bundle) map[string]queue.Admission {
		bucket = b.limiter(t, "tenant", limiters.TokenBucket, limiters.PerHour(5))
		window = b.limiter(t, "global", limiters.FixedWindow, limiters.PerMinute(3))
		return map[string]queue.Admission{"api": {Limiter: bucket}, "global": {Limiter: window}}
	}})
	ctx := context.Background()
	check := func(ds, key, policy string, lim *limiters.Redis, limitKey string, capacity int) {
		t.Helper()
		for i := range capacity {
			if r := b.post(t, "/v1/downstreams/"+ds+"/tasks", `{"key":"`+key+`"}`); r.status != 202 {
				t.Fatalf("%s task %d: %d %s", ds, i, r.status, r.raw)
			}
		}
		r := b.post(t, "/v1/downstreams/"+ds+"/tasks", `{"key":"`+key+`","cost":1}`)
		if r.status != http.StatusTooManyRequests {
			t.Fatalf("%s: %d %s, want 429", ds, r.status, r.raw)
		}
		state, err := lim.Peek(ctx, limitKey, 1)
		if err != nil {
			t.Fatal(err)
		}
		if state.Allowed {
			t.Fatalf("%s: the limiter allows now; the test is too slow", ds)
		}
		// The response was made a moment before this Peek: its Retry-After
		// is the Peek's rounded up, or one second more across a boundary.
		want := int64(math.Ceil(state.RetryAfter.Seconds()))
		ra := headerInt(t, r.header, "Retry-After")
		if ra != want && ra != want+1 {
			t.Errorf("%s: Retry-After %d, limiter says %v (want %d)", ds, ra, state.RetryAfter, want)
		}
		exact, _ := r.body["retry_after"].(float64)
		if d := exact - state.RetryAfter.Seconds(); d < 0 || d > 1 || int64(math.Ceil(exact)) != ra {
			t.Errorf("%s: body retry_after %v, header %d, limiter %v", ds, exact, ra, state.RetryAfter)
		}
		if got := r.header.Get("RateLimit-Policy"); got != policy {
			t.Errorf("%s: RateLimit-Policy %q, want %q", ds, got, policy)
		}
		name := lim.Config().Name
		if got, want := r.header.Get("RateLimit"), fmt.Sprintf(`"%s";r=0;t=%d`, name, ra); got != want {
			t.Errorf("%s: RateLimit %q, want %q (t equals Retry-After)", ds, got, want)
		}
		if headerInt(t, r.header, "X-RateLimit-Limit") != int64(capacity) || r.header.Get("X-RateLimit-Remaining") != "0" ||
			headerInt(t, r.header, "X-RateLimit-Reset") != ra {
			t.Errorf("%s: X-RateLimit-* = %s/%s/%s, want %d/0/%d", ds, r.header.Get("X-RateLimit-Limit"),
				r.header.Get("X-RateLimit-Remaining"), r.header.Get("X-RateLimit-Reset"), capacity, ra)
		}
		if r.body["limiter"] != name || r.body["algorithm"] != string(lim.Config().Algorithm) || r.body["downstream"] != ds {
			t.Errorf("%s: body %s", ds, r.raw)
		}
		if n := b.total(t, ds); n != capacity {
			t.Errorf("%s: %d tasks enqueued, want %d", ds, n, capacity)
		}
	}
	check("api", "t1", `"tenant";q=5;w=3600`, bucket, "t1", 5)
	check("global", "any", `"global";q=3;w=60`, window, "any", 3)
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxBody: 1024, maxPayload: 100, admission: func(b *bundle) map[string]queue.Admission {
		return map[string]queue.Admission{"api": {Limiter: b.limiter(t, "tenant", limiters.TokenBucket, limiters.PerHour(10))}}
	}})
	big := strings.Repeat("x", 200)
	cases := []struct {
		path, body string
		status     int
		want       string
	}{
		{"/v1/downstreams/api/tasks", ``, 400, "empty input"},
		{"/v1/downstreams/api/tasks", `{"payload":`, 400, "malformed JSON"},
		{"/v1/downstreams/api/tasks", `[{}]`, 400, "want an object"},
		{"/v1/downstreams/api/tasks", `{"cots":2}`, 400, `unknown field "cots"`},
		{"/v1/downstreams/api/tasks", `{"cost":-1}`, 400, "cost: must not be negative"},
		{"/v1/downstreams/api/tasks", `{"cost":11}`, 400, "cost: 11 exceeds the capacity 10 of token_bucket"},
		{"/v1/downstreams/api/tasks", `{"at":"soon"}`, 400, `at: invalid time "soon"`},
		{"/v1/downstreams/api/tasks", `{"at":1,"in":"1s"}`, 400, "set both at and in"},
		{"/v1/downstreams/api/tasks", `{"max_retry":20000}`, 400, "max_retry: must be 0..10000"},
		{"/v1/downstreams/api/tasks", `{"payload":"` + big + `"}`, 400, "payload is 202 bytes, over the limit of 100"},
		{"/v1/downstreams/api/tasks", `{"downstream":"global"}`, 400, `the body says "global" but the path says "api"`},
		{"/v1/downstreams/api/tasks", `{"key":"` + strings.Repeat("k", 1025) + `"}`, 413, "larger than the limit of 1024"},
		{"/v1/downstreams/a%20b/tasks", `{}`, 400, `downstream "a b"`},
		{"/v1/downstreams/nope/tasks", `{}`, 404, `unknown downstream "nope"`},
		{"/v1/tasks", `{"downstream":"nope"}`, 400, `unknown downstream "nope"`},
		{"/v1/tasks", `{}`, 400, "downstream: required"},
		{"/v1/downstreams/api/tasks", `{"unique":"a\nb"}`, 400, `unique key "a\nb": control character U+000A`},
		{"/v1/downstreams/api/tasks", `{"unique":"a\r\n"}`, 400, `unique key "a\r\n": control character U+000D`},
		{"/v1/downstreams/api/tasks", `{"unique":"a\u0000"}`, 400, `unique key "a\x00": control character U+0000`},
		{"/v1/downstreams/api/tasks", `{"type":"x\ty"}`, 400, `type "x\ty": control character U+0009`},
		{"/v1/downstreams/api/tasks", `{"type":"` + strings.Repeat("t", 129) + `"}`, 400, "is 129 bytes, over the limit of 128"},
	}
	for i, c := range cases {
		r := b.post(t, c.path, c.body)
		msg, _ := r.body["error"].(string)
		if r.status != c.status || !strings.Contains(msg, c.want) || strings.ContainsAny(msg, "\n\r") {
			t.Errorf("case %d: %d %q, want %d with an error containing %q", i, r.status, msg, c.status, c.want)
		}
	}
	// Over the body limit without a Content-Length (chunked): 413 too.
	r := b.do(t, "POST", "/v1/downstreams/api/tasks", io.MultiReader(strings.NewReader(`{"payload":"`), strings.NewReader(strings.Repeat("y", 2000)+`"}`)))
	if r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked oversize body: %d %s, want 413", r.status, r.raw)
	}
	// A Content-Length over the limit is refused before the body is read.
	req, _ := http.NewRequest("POST", b.base+"/v1/downstreams/api/tasks", bytes.NewReader(make([]byte, 4096)))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 413 {
		t.Errorf("Content-Length 4096: %d, want 413", res.StatusCode)
	}
	if res, err := http.Get(b.base + "/v1/tasks"); err != nil || res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != "POST" {
		t.Errorf("GET /v1/tasks: %v %v, want 405 with Allow: POST", res.Status, err)
	} else {
		res.Body.Close()
	}
	for _, ds := range []string{"api", "global", "nope"} {
		if n := b.total(t, ds); n != 0 {
			t.Errorf("%s: %d tasks enqueued by bad requests, want 0", ds, n)
		}
	}
}

func TestBearerToken(t *testing.T) {
	t.Parallel()
	b := setup(t, options{token: "s3cret"})
	for _, auth := range []string{"", "Bearer wrong", "Bearer s3cret2", "s3cret", "Basic czNjcmV0"} {
		r := b.post(t, "/v1/downstreams/api/tasks", `{}`, "Authorization", auth)
		if r.status != 401 || r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("Authorization %q: %d, want 401 with WWW-Authenticate", auth, r.status)
		}
		if r := b.do(t, "GET", "/v1/downstreams/api/tasks/x", nil, "Authorization", auth); r.status != 401 {
			t.Errorf("GET with Authorization %q: %d, want 401", auth, r.status)
		}
	}
	if n := b.total(t, "api"); n != 0 {
		t.Errorf("%d tasks enqueued without the token, want 0", n)
	}
	if r := b.post(t, "/v1/downstreams/api/tasks", `{}`); r.status != 202 {
		t.Errorf("with the token: %d %s, want 202", r.status, r.raw)
	}
}

// A body that starts with a UTF-8 byte order mark is accepted, as the
// enqueue CLI accepts a JSON Lines file that starts with one.
func TestByteOrderMark(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	r := b.post(t, "/v1/downstreams/api/tasks", "\ufeff"+`{"payload":{"n":1},"unique":"bom-1"}`)
	if r.status != http.StatusAccepted || r.body["id"] != "bom-1" {
		t.Errorf("%d %s, want 202 with id bom-1", r.status, r.raw)
	}
}

func TestDuplicateUnique(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	if r := b.post(t, "/v1/downstreams/api/tasks", `{"unique":"inv-1"}`); r.status != 202 || r.body["id"] != "inv-1" {
		t.Fatalf("first: %d %s", r.status, r.raw)
	}
	r := b.post(t, "/v1/downstreams/api/tasks", `{"unique":"inv-1"}`)
	if r.status != http.StatusConflict || r.body["id"] != "inv-1" || r.body["location"] != "/v1/downstreams/api/tasks/inv-1" {
		t.Errorf("second: %d %s, want 409 naming the existing task", r.status, r.raw)
	}
}

// A deferring policy answers 202 with the task scheduled at the
// Retry-After instead of 429.
func TestDeferred(t *testing.T) {
	t.Parallel()
	b := setup(t, options{admission: func(b *bundle) map[string]queue.Admission {
		return map[string]queue.Admission{"deferred": {OnReject: queue.Defer,
			Limiter: b.limiter(t, "tenant", limiters.TokenBucket, limiters.PerMinute(2))}}
	}})
	for range 2 {
		if r := b.post(t, "/v1/downstreams/deferred/tasks", `{"key":"t"}`); r.status != 202 || r.body["deferred"] != false {
			t.Fatalf("%d %s", r.status, r.raw)
		}
	}
	before := time.Now()
	r := b.post(t, "/v1/downstreams/deferred/tasks", `{"key":"t"}`)
	ra, _ := r.body["retry_after"].(float64)
	at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(r.body["process_at"]))
	if r.status != 202 || r.body["deferred"] != true || r.body["state"] != "scheduled" || ra < 29 || ra > 30 || err != nil {
		t.Fatalf("%d %s, want 202 deferred, scheduled, retry_after ≈ 30s", r.status, r.raw)
	}
	if at.Before(before.Add(time.Duration(ra * float64(time.Second)))) {
		t.Errorf("process_at %v is before the Retry-After", at)
	}
	if r.header.Get("Retry-After") != "" || r.header.Get("RateLimit") != `"tenant";r=0;t=30` {
		t.Errorf("headers: Retry-After %q RateLimit %q, want none and \"tenant\";r=0;t=30", r.header.Get("Retry-After"), r.header.Get("RateLimit"))
	}
}

// The seeds' shape over HTTP: the global window's 429 names it, and the
// tenant's tokens are untouched by the rejection.
func TestLayeredRejectionNamesGlobal(t *testing.T) {
	t.Parallel()
	var tenant *limiters.Redis
	b := setup(t, options{admission: func(b *bundle) map[string]queue.Admission {
		tenant = b.limiter(t, "tenant", limiters.TokenBucket, limiters.PerHour(10))
		global := b.limiter(t, "global", limiters.FixedWindow, limiters.PerHour(2))
		l, err := limiters.NewLayered(limiters.Layer{Limiter: tenant}, limiters.Layer{Limiter: global, Key: limiters.Global})
		if err != nil {
			t.Fatal(err)
		}
		return map[string]queue.Admission{"api": {Limiter: l}}
	}})
	for i, want := range []int{202, 202, 429, 429, 429} {
		r := b.post(t, "/v1/downstreams/api/tasks", `{"key":"a"}`)
		if r.status != want {
			t.Fatalf("step %d: %d %s, want %d", i, r.status, r.raw, want)
		}
		if want == 429 && (r.body["limiter"] != "global" || !strings.HasPrefix(r.header.Get("RateLimit-Policy"), `"global";q=2;w=3600`)) {
			t.Errorf("step %d: 429 from %v (%s), want the global window", i, r.body["limiter"], r.header.Get("RateLimit-Policy"))
		}
	}
	res, err := tenant.Peek(context.Background(), "a", 1)
	if err != nil || res.Remaining != 7 {
		t.Errorf("tenant a after 2 admissions and 3 global rejections: Peek = %v %v, want 8 tokens (7 after taking 1)", res, err)
	}
}

// With Redis stopped, the API keeps serving: 503 with Retry-After, the
// policy named for fail_closed, /healthz up, and back to 202 once Redis
// returns.
func TestRedisDownKeepsServing(t *testing.T) {
	t.Parallel()
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop(); srv.Cleanup() })
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	b := setup(t, options{rdb: rdb, admission: func(b *bundle) map[string]queue.Admission {
		mk := func(name string, p limiters.Policy) limiters.Limiter {
			l, err := limiters.New(rdb, limiters.Config{Name: name, Limit: limiters.PerHour(100), Prefix: b.prefix, Failure: p})
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		return map[string]queue.Admission{"open": {Limiter: mk("open", limiters.FailOpen)}, "closed": {Limiter: mk("closed", limiters.FailClosed)}}
	}})
	for _, ds := range []string{"open", "closed"} {
		if r := b.post(t, "/v1/downstreams/"+ds+"/tasks", `{"key":"t"}`); r.status != 202 {
			t.Fatalf("%s before the stop: %d %s", ds, r.status, r.raw)
		}
	}
	srv.Stop()
	for ds, want := range map[string]string{"closed": "policy is fail_closed", "open": "queue unavailable"} {
		start := time.Now()
		r := b.post(t, "/v1/downstreams/"+ds+"/tasks", `{"key":"t"}`)
		msg, _ := r.body["error"].(string)
		if r.status != 503 || r.header.Get("Retry-After") != "1" || !strings.Contains(msg, want) {
			t.Errorf("%s with Redis down: %d %s (Retry-After %q), want 503 saying %q with Retry-After 1", ds, r.status, r.raw, r.header.Get("Retry-After"), want)
		}
		// go-redis retries each command a few times before it gives up;
		// the request must still end well within the API's own bound.
		if d := time.Since(start); d > httpapi.DefaultTimeout {
			t.Errorf("%s: the 503 took %v", ds, d)
		}
	}
	if r := b.do(t, "GET", "/healthz", nil); r.status != 200 {
		t.Errorf("/healthz with Redis down: %d", r.status)
	}
	if r := b.do(t, "GET", "/readyz", nil); r.status != 503 {
		t.Errorf("/readyz with Redis down: %d, want 503", r.status)
	}
	if err := srv.StartAgain(); err != nil {
		t.Fatal(err)
	}
	for _, ds := range []string{"open", "closed"} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			r := b.post(t, "/v1/downstreams/"+ds+"/tasks", `{"key":"t"}`)
			if r.status == 202 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s after Redis came back: still %d %s", ds, r.status, r.raw)
			}
			time.Sleep(50 * time.Millisecond) // poll interval, bounded by the deadline
		}
	}
}

func TestPolicy(t *testing.T) {
	t.Parallel()
	cases := []struct {
		l       limiters.Limit
		alg     limiters.Algorithm
		q, w    int64
		comment string
	}{
		{limiters.PerMinute(100), limiters.FixedWindow, 100, 60, "window: the limit per window"},
		{limiters.PerSecond(10), limiters.SlidingLog, 10, 1, ""},
		{limiters.Limit{Rate: 5, Period: 500 * time.Millisecond}, limiters.SlidingCounter, 5, 1, "sub-second windows round up to 1s"},
		{limiters.PerSecond(10).WithBurst(20), limiters.TokenBucket, 20, 2, "bucket: capacity and the time to refill it"},
		{limiters.PerHour(5), limiters.TokenBucket, 5, 3600, ""},
		{limiters.Limit{Rate: 3, Period: time.Second, Burst: 10}, limiters.LeakyBucket, 10, 4, "3.33s rounds up"},
	}
	for i, c := range cases {
		if q, w := httpapi.Policy(c.l, c.alg); q != c.q || w != c.w {
			t.Errorf("case %d (%s): Policy(%v, %s) = q=%d w=%d, want q=%d w=%d", i, c.comment, c.l, c.alg, q, w, c.q, c.w)
		}
	}
	h := http.Header{}
	httpapi.SetRateLimitHeaders(h, limiters.Result{Name: `we"ird`, Limit: limiters.PerMinute(10), Algorithm: limiters.FixedWindow,
		Remaining: -1, RetryAfter: 1500 * time.Millisecond})
	if got := h.Get("RateLimit"); got != `"we\"ird";r=0;t=2` {
		t.Errorf("RateLimit = %q", got)
	}
}
