package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/envelope"
	"github.com/shaper-io/shaper/internal/metrics"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
)

// bundle is what most tests need: a Redis client, a unique prefix, and an
// inspector over it.
type bundle struct {
	rdb    redis.UniversalClient
	prefix string
	in     *Inspector
}

func setup(tb testing.TB) *bundle {
	tb.Helper()
	b := &bundle{rdb: redistest.Client(tb), prefix: redistest.Prefix(tb)}
	b.in = NewInspector(b.rdb, b.prefix)
	tb.Cleanup(func() { b.in.Asynq().Close() })
	return b
}

func (b *bundle) producer(tb testing.TB, cfg ProducerConfig) *Producer {
	tb.Helper()
	cfg.Prefix = b.prefix
	p := NewProducer(b.rdb, cfg)
	tb.Cleanup(func() { p.Close() })
	return p
}

func (b *bundle) limiter(tb testing.TB, name string, alg limiters.Algorithm, l limiters.Limit) *limiters.Redis {
	tb.Helper()
	lim, err := limiters.New(b.rdb, limiters.Config{Name: name, Algorithm: alg, Limit: l, Prefix: b.prefix})
	if err != nil {
		tb.Fatalf("limiters.New: %v", err)
	}
	return lim
}

func (b *bundle) backlog(tb testing.TB, ds string) Backlog {
	tb.Helper()
	bl, err := b.in.Backlog(ds)
	// Inspector.Backlog means to report a queue that was never written as
	// empty, but asynq's GetQueueInfo does not wrap ErrQueueNotFound.
	if err != nil && strings.Contains(err.Error(), "does not exist") {
		return Backlog{Downstream: ds}
	}
	if err != nil {
		tb.Fatalf("Backlog(%q): %v", ds, err)
	}
	return bl
}

func (b *bundle) task(tb testing.TB, ds, id string) *asynq.TaskInfo {
	tb.Helper()
	info, err := b.in.Asynq().GetTaskInfo(b.in.space.Queue(ds), id)
	if err != nil {
		tb.Fatalf("GetTaskInfo(%q): %v", id, err)
	}
	return info
}

func intp(i int) *int { return &i }

func TestValidate(t *testing.T) {
	t.Parallel()
	p := NewProducer(redis.NewClient(&redis.Options{Addr: "unused.invalid:0"}),
		ProducerConfig{Downstreams: []string{"api", "db"}, MaxPayload: 10})
	defer p.Close()
	long := strings.Repeat("k", 1025)
	cases := []struct {
		task Task
		want error  // nil: valid
		msg  string // part of the message
	}{
		{Task{Downstream: "api"}, nil, ""},
		{Task{Downstream: "db", Cost: 3, Payload: []byte("0123456789"), MaxRetry: intp(0)}, nil, ""},
		{Task{}, ErrInvalidTask, "downstream is required"},
		{Task{Downstream: "a b"}, ErrInvalidTask, `downstream "a b"`},
		{Task{Downstream: strings.Repeat("x", 65)}, ErrInvalidTask, "1-64"},
		{Task{Downstream: "web"}, ErrUnknownDownstream, `"web"`},
		{Task{Downstream: "api", Cost: -1}, ErrInvalidTask, "cost must not be negative, got -1"},
		{Task{Downstream: "api", Payload: []byte("01234567890")}, ErrInvalidTask, "payload is 11 bytes, over the limit of 10"},
		{Task{Downstream: "api", MaxRetry: intp(-1)}, ErrInvalidTask, "max retry must be 0..10000, got -1"},
		{Task{Downstream: "api", MaxRetry: intp(10001)}, ErrInvalidTask, "got 10001"},
		{Task{Downstream: "api", Key: long}, ErrInvalidTask, "key is 1025 bytes"},
		{Task{Downstream: "api", UniqueKey: long}, ErrInvalidTask, "unique key is 1025 bytes"},
		{Task{Downstream: "api", Timeout: -time.Second}, ErrInvalidTask, "timeout must not be negative"},
	}
	for i, c := range cases {
		err := p.Validate(c.task)
		if c.want == nil {
			if err != nil {
				t.Errorf("case %d: Validate = %v, want nil", i, err)
			}
			continue
		}
		if !errors.Is(err, c.want) || !strings.Contains(fmt.Sprint(err), c.msg) {
			t.Errorf("case %d: Validate = %v, want %v containing %q", i, err, c.want, c.msg)
		}
	}
}

// Without admission, a task goes into its downstream's asynq queue with
// its payload untouched and shaper's fields in headers.
func TestEnqueueEnvelope(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.producer(t, ProducerConfig{MaxRetry: map[string]int{"api": 7}})
	ctx := context.Background()
	payload := []byte(`{"n": 1, "raw": "\u00e9"}`)
	rec, err := p.Enqueue(ctx, Task{Downstream: "api", Payload: payload, Key: "tenant-1", Cost: 3})
	if err != nil {
		t.Fatal(err)
	}
	if rec.ID == "" || rec.Queue != b.prefix+":api" || rec.Downstream != "api" || rec.Deferred {
		t.Errorf("receipt = %+v, want an id, queue %q, not deferred", rec, b.prefix+":api")
	}
	if q := p.Queue("api"); q != rec.Queue {
		t.Errorf("Queue(api) = %q, want %q", q, rec.Queue)
	}
	info := b.task(t, "api", rec.ID)
	if string(info.Payload) != string(payload) {
		t.Errorf("payload = %q, want %q (untouched)", info.Payload, payload)
	}
	if info.Type != DefaultType {
		t.Errorf("type = %q, want %q", info.Type, DefaultType)
	}
	if info.State != asynq.TaskStatePending {
		t.Errorf("state = %v, want pending", info.State)
	}
	meta, err := envelope.Decode(info.Headers)
	if err != nil {
		t.Fatal(err)
	}
	if meta.Cost != 3 || meta.Key != "tenant-1" || meta.MaxRetry != 7 {
		t.Errorf("headers = %+v, want cost 3, key tenant-1, max retry 7 (the downstream's)", meta)
	}
	if info.MaxRetry != 7+envelope.CrashAllowance {
		t.Errorf("asynq MaxRetry = %d, want %d (budget + crash allowance)", info.MaxRetry, 7+envelope.CrashAllowance)
	}

	// A task's own retry budget and type win; cost 0 means 1.
	rec, err = p.Enqueue(ctx, Task{Downstream: "other", Type: "charge", MaxRetry: intp(0)})
	if err != nil {
		t.Fatal(err)
	}
	info = b.task(t, "other", rec.ID)
	meta, _ = envelope.Decode(info.Headers)
	if info.Type != "charge" || meta.Cost != 1 || meta.MaxRetry != 0 || info.MaxRetry != envelope.CrashAllowance {
		t.Errorf("got type %q cost %d budget %d asynq max retry %d, want charge, 1, 0, %d",
			info.Type, meta.Cost, meta.MaxRetry, info.MaxRetry, envelope.CrashAllowance)
	}
}

func TestEnqueueUnknownDownstreamAndInvalid(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.producer(t, ProducerConfig{Downstreams: []string{"api"}})
	ctx := context.Background()
	if _, err := p.Enqueue(ctx, Task{Downstream: "nope"}); !errors.Is(err, ErrUnknownDownstream) {
		t.Errorf("unknown downstream: err = %v, want ErrUnknownDownstream", err)
	}
	if _, err := p.Enqueue(ctx, Task{Downstream: "api", Cost: -2}); !errors.Is(err, ErrInvalidTask) {
		t.Errorf("negative cost: err = %v, want ErrInvalidTask", err)
	}
	for _, ds := range []string{"api", "nope"} {
		if n := b.backlog(t, ds).Total(); n != 0 {
			t.Errorf("%s: %d tasks enqueued, want 0", ds, n)
		}
	}
}

func TestEnqueueUniqueAndSchedule(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.producer(t, ProducerConfig{})
	ctx := context.Background()
	at := time.Now().Add(time.Hour)
	rec, err := p.Enqueue(ctx, Task{Downstream: "api", UniqueKey: "invoice-42", ProcessAt: at})
	if err != nil {
		t.Fatal(err)
	}
	if rec.ID != "invoice-42" {
		t.Errorf("id = %q, want the unique key", rec.ID)
	}
	if !rec.ProcessAt.Equal(at) {
		t.Errorf("ProcessAt = %v, want %v", rec.ProcessAt, at)
	}
	_, err = p.Enqueue(ctx, Task{Downstream: "api", UniqueKey: "invoice-42"})
	if !errors.Is(err, ErrDuplicate) || !strings.Contains(err.Error(), "invoice-42") {
		t.Errorf("second enqueue: err = %v, want ErrDuplicate naming the key", err)
	}
	bl := b.backlog(t, "api")
	if bl.Scheduled != 1 || bl.Total() != 1 {
		t.Errorf("backlog = %+v, want exactly 1 scheduled", bl)
	}
	// A time in the past runs now.
	rec, err = p.Enqueue(ctx, Task{Downstream: "api", ProcessAt: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if st := b.task(t, "api", rec.ID).State; st != asynq.TaskStatePending {
		t.Errorf("past ProcessAt: state %v, want pending", st)
	}
}

// A rejection returns *RejectedError with the limiter's Result, enqueues
// nothing, and counts the decision.
func TestAdmissionReject(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	lim := b.limiter(t, "tenant", limiters.TokenBucket, limiters.PerHour(3))
	p := b.producer(t, ProducerConfig{Registerer: reg, Admission: map[string]Admission{"api": {Limiter: lim}}})
	ctx := context.Background()
	for i := range 3 {
		rec, err := p.Enqueue(ctx, Task{Downstream: "api", Key: "t1"})
		if err != nil {
			t.Fatalf("task %d: %v", i, err)
		}
		if !rec.Admission.Allowed || rec.Admission.Remaining != int64(2-i) {
			t.Errorf("task %d: admission %v, want allowed with %d remaining", i, rec.Admission, 2-i)
		}
	}
	rec, err := p.Enqueue(ctx, Task{Downstream: "api", Key: "t1"})
	var rej *RejectedError
	if !errors.As(err, &rej) {
		t.Fatalf("4th task: err = %v, want *RejectedError", err)
	}
	if rec.ID != "" {
		t.Errorf("rejected task has id %q, want none", rec.ID)
	}
	res := rej.Result
	// 1 token per 20 minutes; the bucket was emptied a moment ago.
	if res.Allowed || res.Name != "tenant" || res.Algorithm != limiters.TokenBucket || res.Remaining != 0 ||
		res.RetryAfter < 19*time.Minute || res.RetryAfter > 20*time.Minute {
		t.Errorf("rejection result = %+v, want token_bucket tenant, 0 remaining, retry in (19m, 20m]", res)
	}
	if rej.Downstream != "api" || !strings.Contains(rej.Error(), `rejected by admission (token_bucket "tenant")`) {
		t.Errorf("error = %q", rej.Error())
	}
	// Another tenant is not affected.
	if _, err := p.Enqueue(ctx, Task{Downstream: "api", Key: "t2"}); err != nil {
		t.Errorf("other tenant: %v", err)
	}
	if n := b.backlog(t, "api").Pending; n != 4 {
		t.Errorf("pending = %d, want 4 (3 + the other tenant's)", n)
	}
	for outcome, want := range map[string]float64{"allowed": 4, "rejected": 1} {
		if got := testutil.ToFloat64(m.Decisions.WithLabelValues("api", "tenant", outcome)); got != want {
			t.Errorf("decisions{%s} = %v, want %v", outcome, got, want)
		}
	}
	if got := testutil.ToFloat64(m.Enqueued.WithLabelValues("api")); got != 4 {
		t.Errorf("enqueued = %v, want 4", got)
	}
}

// With Defer, a rejected task is enqueued to run at its Retry-After: never
// earlier, even though asynq keeps scheduled times in whole seconds.
func TestAdmissionDefer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	// 2 tokens, one back every 1.5s.
	lim := b.limiter(t, "tenant", limiters.TokenBucket, limiters.Limit{Rate: 2, Period: 3 * time.Second, Burst: 2})
	p := b.producer(t, ProducerConfig{Registerer: reg, Admission: map[string]Admission{"api": {Limiter: lim, OnReject: Defer}}})
	ctx := context.Background()
	for range 2 {
		if rec, err := p.Enqueue(ctx, Task{Downstream: "api", Key: "t1"}); err != nil || rec.Deferred {
			t.Fatalf("enqueue: %+v %v, want accepted", rec, err)
		}
	}
	for i := range 5 {
		before := time.Now()
		rec, err := p.Enqueue(ctx, Task{Downstream: "api", Key: "t1"})
		if err != nil {
			t.Fatalf("deferred %d: %v", i, err)
		}
		ra := rec.Admission.RetryAfter
		if !rec.Deferred || rec.Admission.Allowed || ra <= 0 || ra > 1500*time.Millisecond {
			t.Fatalf("deferred %d: receipt %+v, want deferred with a Retry-After in (0, 1.5s]", i, rec)
		}
		if rec.ProcessAt.Before(before.Add(ra)) {
			t.Errorf("deferred %d: ProcessAt %v is before the Retry-After (%v + %v)", i, rec.ProcessAt, before, ra)
		}
		// What asynq stored: the scheduled set's score.
		info := b.task(t, "api", rec.ID)
		if info.State != asynq.TaskStateScheduled {
			t.Errorf("deferred %d: state %v, want scheduled", i, info.State)
		}
		if info.NextProcessAt.Before(before.Add(ra)) {
			t.Errorf("deferred %d: stored process time %v is before the Retry-After (%v): it would run early",
				i, info.NextProcessAt.Format(time.RFC3339Nano), before.Add(ra).Format(time.RFC3339Nano))
		}
		if info.NextProcessAt.After(time.Now().Add(ra + time.Second)) {
			t.Errorf("deferred %d: stored process time %v is more than 1s past the Retry-After", i, info.NextProcessAt)
		}
	}
	bl := b.backlog(t, "api")
	if bl.Pending != 2 || bl.Scheduled != 5 {
		t.Errorf("backlog = %+v, want 2 pending, 5 scheduled", bl)
	}
	if got := testutil.ToFloat64(m.Deferrals.WithLabelValues("api")); got != 5 {
		t.Errorf("deferrals = %v, want 5", got)
	}
	if got := testutil.ToFloat64(m.Decisions.WithLabelValues("api", "tenant", "deferred")); got != 5 {
		t.Errorf("decisions{deferred} = %v, want 5", got)
	}
	// A task scheduled later than its Retry-After keeps its own time.
	later := time.Now().Add(time.Hour)
	rec, err := p.Enqueue(ctx, Task{Downstream: "api", Key: "t1", ProcessAt: later})
	if err != nil || !rec.Deferred || !rec.ProcessAt.Equal(later) {
		t.Errorf("deferred with a later ProcessAt: %+v %v, want ProcessAt %v", rec, err, later)
	}
}

// If the enqueue fails after admission allowed the task, the charge is
// given back, in every layer.
func TestRefundWhenEnqueueFails(t *testing.T) {
	// Not parallel: enqueueHook is package state.
	b := setup(t)
	tenant := b.limiter(t, "tenant", limiters.TokenBucket, limiters.PerHour(5))
	global := b.limiter(t, "global", limiters.FixedWindow, limiters.PerHour(100))
	layered, err := limiters.NewLayered(limiters.Layer{Limiter: tenant}, limiters.Layer{Limiter: global, Key: limiters.Global})
	if err != nil {
		t.Fatal(err)
	}
	p := b.producer(t, ProducerConfig{Admission: map[string]Admission{"api": {Limiter: layered}}})
	ctx := context.Background()
	fail := errors.New("disk full")
	enqueueHook = func(context.Context, Task) error { return fail }
	t.Cleanup(func() { enqueueHook = nil })
	for range 10 { // twice the tenant's capacity: without refunds, the last 5 would be rejected
		rec, err := p.Enqueue(ctx, Task{Downstream: "api", Key: "t1", Cost: 1})
		if !errors.Is(err, ErrEnqueue) || !errors.Is(err, fail) {
			t.Fatalf("err = %v, want ErrEnqueue wrapping the hook's error", err)
		}
		if !rec.Admission.Allowed {
			t.Fatalf("admission = %v, want allowed (the failure came after it)", rec.Admission)
		}
	}
	enqueueHook = nil
	if res, err := tenant.Peek(ctx, "t1", 5); err != nil || !res.Allowed || res.Remaining != 0 {
		t.Errorf("tenant after refunds: Peek(5) = %v, %v; want the whole capacity of 5 back", res, err)
	}
	if res, err := global.Peek(ctx, limiters.GlobalKey, 100); err != nil || !res.Allowed {
		t.Errorf("global after refunds: Peek(100) = %v, %v; want the whole window back", res, err)
	}
	if n := b.backlog(t, "api").Total(); n != 0 {
		t.Errorf("%d tasks in the queue, want 0", n)
	}
	// And the charges still work afterwards.
	for i := range 5 {
		if _, err := p.Enqueue(ctx, Task{Downstream: "api", Key: "t1"}); err != nil {
			t.Fatalf("task %d after refunds: %v", i, err)
		}
	}
	if _, err := p.Enqueue(ctx, Task{Downstream: "api", Key: "t1"}); !errors.As(err, new(*RejectedError)) {
		t.Errorf("6th task: err = %v, want a rejection", err)
	}
}

// The seeds' shape: a per-tenant token bucket plus a global fixed window.
// A rejection by the global window must not consume the tenant's tokens.
func TestLayeredGlobalRejectionKeepsTenantTokens(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tenant := b.limiter(t, "tenant", limiters.TokenBucket, limiters.PerHour(10))
	global := b.limiter(t, "global", limiters.FixedWindow, limiters.PerHour(5))
	layered, err := limiters.NewLayered(limiters.Layer{Limiter: tenant}, limiters.Layer{Limiter: global, Key: limiters.Global})
	if err != nil {
		t.Fatal(err)
	}
	p := b.producer(t, ProducerConfig{Admission: map[string]Admission{"api": {Limiter: layered}}})
	ctx := context.Background()
	for i := range 5 {
		if _, err := p.Enqueue(ctx, Task{Downstream: "api", Key: "a"}); err != nil {
			t.Fatalf("task %d: %v", i, err)
		}
	}
	for i, key := range []string{"a", "a", "a", "b"} {
		_, err := p.Enqueue(ctx, Task{Downstream: "api", Key: key})
		var rej *RejectedError
		if !errors.As(err, &rej) || rej.Result.Name != "global" {
			t.Fatalf("step %d (key %s): err = %v, want a rejection by the global window", i, key, err)
		}
	}
	for key, want := range map[string]int64{"a": 5, "b": 10} {
		res, err := tenant.Peek(ctx, key, 1)
		if err != nil {
			t.Fatal(err)
		}
		// Peek reports what would remain after taking 1.
		if got := res.Remaining + 1; got != want {
			t.Errorf("tenant %s: %d tokens, want %d (global rejections must not charge it)", key, got, want)
		}
	}
	if n := b.backlog(t, "api").Total(); n != 5 {
		t.Errorf("%d tasks enqueued, want 5", n)
	}
}

// A cost above a limiter's capacity is an error, not a rejection with a
// Retry-After that could never come true.
func TestCostExceedsCapacity(t *testing.T) {
	t.Parallel()
	b := setup(t)
	lim := b.limiter(t, "tenant", limiters.TokenBucket, limiters.PerSecond(10))
	for _, onReject := range []OnReject{Reject, Defer} {
		p := b.producer(t, ProducerConfig{Admission: map[string]Admission{"api": {Limiter: lim, OnReject: onReject}}})
		_, err := p.Enqueue(context.Background(), Task{Downstream: "api", Key: "t", Cost: 11})
		if !errors.Is(err, limiters.ErrCostExceedsCapacity) || errors.As(err, new(*RejectedError)) {
			t.Errorf("on reject %d: err = %v, want ErrCostExceedsCapacity and no RejectedError", onReject, err)
		}
	}
	if n := b.backlog(t, "api").Total(); n != 0 {
		t.Errorf("%d tasks enqueued, want 0", n)
	}
}

// Many goroutines against one bucket: exactly its capacity is admitted.
func TestConcurrentAdmissionIsExact(t *testing.T) {
	t.Parallel()
	b := setup(t)
	lim := b.limiter(t, "tenant", limiters.TokenBucket, limiters.PerHour(100))
	p := b.producer(t, ProducerConfig{Admission: map[string]Admission{"api": {Limiter: lim}}})
	var mu sync.Mutex
	accepted, rejected := 0, 0
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				_, err := p.Enqueue(context.Background(), Task{Downstream: "api", Key: "t", Payload: []byte(fmt.Sprint(g, i))})
				mu.Lock()
				switch {
				case err == nil:
					accepted++
				case errors.As(err, new(*RejectedError)):
					rejected++
				default:
					t.Errorf("enqueue: %v", err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if accepted != 100 || rejected != 300 {
		t.Errorf("accepted %d, rejected %d; want 100 and 300", accepted, rejected)
	}
	if n := b.backlog(t, "api").Pending; n != 100 {
		t.Errorf("pending = %d, want 100", n)
	}
}

// The failure policy when the limiters' Redis is down and the queue's is
// up: fail_open admits (and says so), fail_closed rejects, and a Defer
// policy does not turn a failed-closed decision into a deferral.
func TestFailurePolicyWithLimiterRedisDown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop(); srv.Cleanup() })
	limRDB := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { limRDB.Close() })
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	mk := func(name string, policy limiters.Policy) limiters.Limiter {
		lim, err := limiters.New(limRDB, limiters.Config{Name: name, Limit: limiters.PerHour(100), Prefix: b.prefix,
			Failure: policy, Timeout: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return lim
	}
	p := b.producer(t, ProducerConfig{Registerer: reg, Admission: map[string]Admission{
		"open":         {Limiter: mk("open", limiters.FailOpen)},
		"closed":       {Limiter: mk("closed", limiters.FailClosed)},
		"closed-defer": {Limiter: mk("closed-defer", limiters.FailClosed), OnReject: Defer},
	}})
	ctx := context.Background()
	for _, ds := range []string{"open", "closed", "closed-defer"} {
		if _, err := p.Enqueue(ctx, Task{Downstream: ds, Key: "t"}); err != nil {
			t.Fatalf("%s with Redis up: %v", ds, err)
		}
	}
	srv.Stop()

	rec, err := p.Enqueue(ctx, Task{Downstream: "open", Key: "t"})
	if err != nil || rec.ID == "" || !rec.Admission.Allowed || !rec.Admission.FailedOpen || !errors.Is(rec.Admission.Cause, limiters.ErrFailedOpen) || rec.Outcome != Accepted {
		t.Errorf("fail_open: %+v, %v; want an enqueued task, no error, and Admission.FailedOpen", rec, err)
	}
	if got := testutil.ToFloat64(m.FailOpen.WithLabelValues("open", "open")); got != 1 {
		t.Errorf("fail_open_total = %v, want 1", got)
	}
	for _, ds := range []string{"closed", "closed-defer"} {
		rec, err := p.Enqueue(ctx, Task{Downstream: ds, Key: "t"})
		if !errors.Is(err, limiters.ErrFailedClosed) || !errors.As(err, new(*RejectedError)) || rec.ID != "" || rec.Deferred || rec.Outcome != Rejected {
			t.Errorf("%s: %+v, %v; want a RejectedError with ErrFailedClosed and nothing enqueued", ds, rec, err)
		}
	}
	want := map[string]int{"open": 2, "closed": 1, "closed-defer": 1}
	for ds, n := range want {
		if got := b.backlog(t, ds).Total(); got != n {
			t.Errorf("%s: %d tasks, want %d", ds, got, n)
		}
	}
}

// With the queue's Redis down, Enqueue fails with ErrEnqueue (after
// admission on its own, healthy Redis allowed and refunded the task).
func TestEnqueueRedisDown(t *testing.T) {
	t.Parallel()
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop(); srv.Cleanup() })
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	b := setup(t)
	lim := b.limiter(t, "tenant", limiters.TokenBucket, limiters.PerHour(2))
	p := NewProducer(rdb, ProducerConfig{Prefix: b.prefix, Admission: map[string]Admission{"api": {Limiter: lim}}})
	defer p.Close()
	srv.Stop()
	ctx := context.Background()
	for range 3 {
		if _, err := p.Enqueue(ctx, Task{Downstream: "api", Key: "t"}); !errors.Is(err, ErrEnqueue) {
			t.Fatalf("err = %v, want ErrEnqueue", err)
		}
	}
	if res, err := lim.Peek(ctx, "t", 2); err != nil || !res.Allowed {
		t.Errorf("tenant: Peek(2) = %v, %v; want both tokens refunded", res, err)
	}
}
