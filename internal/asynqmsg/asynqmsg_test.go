package asynqmsg

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// rig is a Redis with asynq's own Client and Inspector on it.
type rig struct {
	rdb  redis.UniversalClient
	sp   keys.Space
	cl   *asynq.Client
	insp *asynq.Inspector
}

func newRig(t *testing.T) *rig {
	rdb := redistest.Client(t)
	return &rig{rdb: rdb, sp: keys.New(redistest.Prefix(t)), cl: asynq.NewClientFromRedisClient(rdb),
		insp: asynq.NewInspectorFromRedisClient(rdb)}
}

// enqueue enqueues one task of type typ to downstream ds's queue.
func (r *rig) enqueue(t *testing.T, ds, typ string, opts ...asynq.Option) string {
	t.Helper()
	info, err := r.cl.Enqueue(asynq.NewTaskWithHeaders(typ, []byte("p"), map[string]string{"a": "1"}), append([]asynq.Option{asynq.Queue(r.sp.Queue(ds))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return info.ID
}

// TestMessageLayout reads messages written by asynq's real Client and
// checks every field against asynq's Inspector. It fails loudly when asynq
// changes its TaskMessage (a field number this package does not know, or a
// known one read differently).
func TestMessageLayout(t *testing.T) {
	r := newRig(t)
	q := r.sp.Queue("codec")
	dl := time.Now().Add(time.Hour).Truncate(time.Second)
	task := asynq.NewTaskWithHeaders("email:send", []byte("payload \x00\xff"), map[string]string{"k": "v", "trace": "1"})
	info, err := r.cl.Enqueue(task, asynq.Queue(q), asynq.MaxRetry(7), asynq.Timeout(90*time.Second),
		asynq.Deadline(dl), asynq.Unique(time.Hour), asynq.Retention(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := r.rdb.HGet(context.Background(), r.sp.Asynq("codec").Task(info.ID), "msg").Bytes()
	if err != nil {
		t.Fatal(err)
	}
	for b := raw; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num < fieldType || num > fieldHeaders {
			t.Fatalf("asynq's TaskMessage has field %d (wire type %d) this package does not know: asynq's layout changed", num, typ)
		}
		b = b[n+protowire.ConsumeFieldValue(num, typ, b[n:]):]
	}
	m, err := Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"type", m.Type, info.Type},
		{"payload", string(m.Payload), string(info.Payload)},
		{"id", m.ID, info.ID},
		{"queue", m.Queue, info.Queue},
		{"retry", m.Retry, info.MaxRetry},
		{"timeout", time.Duration(m.Timeout) * time.Second, info.Timeout},
		{"deadline", time.Unix(m.Deadline, 0).Equal(info.Deadline), true},
		{"retention", time.Duration(m.Retention) * time.Second, info.Retention},
		{"headers", len(m.Headers) == 2 && m.Headers["k"] == "v" && m.Headers["trace"] == "1", true},
		{"unique key set", m.UniqueKey != "", true},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	if got := m.Failed("", 0, false); !bytes.Equal(got, raw) {
		t.Errorf("rewriting no field changed the bytes:\n got %x\nwant %x", got, raw)
	}
}

// TestMessageRewrite rewrites a real message as a retry would, stores
// it, and has asynq's Inspector read the result; a second rewrite keeps
// the fields in place.
func TestMessageRewrite(t *testing.T) {
	r := newRig(t)
	ids := []string{r.enqueue(t, "codec", "job", asynq.MaxRetry(3), asynq.Retention(time.Hour))}
	key := r.sp.Asynq("codec").Task(ids[0])
	ctx := context.Background()
	raw := []byte(r.rdb.HGet(ctx, key, "msg").Val())
	m, err := Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Minute).Truncate(time.Second)
	once := m.Failed("boom: first", at.Unix(), true)
	m2, err := Decode(once)
	if err != nil {
		t.Fatal(err)
	}
	twice := m2.Failed("boom: second", at.Unix(), true)
	for i, b := range [][]byte{once, twice} {
		if err := r.rdb.HSet(ctx, key, "msg", b).Err(); err != nil {
			t.Fatal(err)
		}
		info, err := r.insp.GetTaskInfo(r.sp.Queue("codec"), ids[0])
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"boom: first", "boom: second"}[i]
		if info.Retried != i+1 || info.LastErr != want || !info.LastFailedAt.Equal(at) || info.MaxRetry != 3 ||
			info.Retention != time.Hour || info.Type != "job" {
			t.Errorf("rewrite %d: Inspector read retried %d err %q failed at %v max %d retention %v type %q, want %d %q %v 3 1h job",
				i+1, info.Retried, info.LastErr, info.LastFailedAt, info.MaxRetry, info.Retention, info.Type, i+1, want, at)
		}
	}
	if len(twice) != len(once)+len(" second")-len(" first") {
		t.Errorf("a second rewrite grew the message from %d to %d bytes: a field was duplicated", len(once), len(twice))
	}
	// a message asynq's Inspector reads for an unreadable one
	qm := Quarantined(ids[0], r.sp.Queue("codec"), []byte{0xff, 0xff}, "shaper: malformed", at.Unix())
	if err := r.rdb.HSet(ctx, key, "msg", qm).Err(); err != nil {
		t.Fatal(err)
	}
	if info, err := r.insp.GetTaskInfo(r.sp.Queue("codec"), ids[0]); err != nil || info.LastErr != "shaper: malformed" ||
		!bytes.Equal(info.Payload, []byte{0xff, 0xff}) {
		t.Errorf("quarantined message: got %+v, %v", info, err)
	}
}

// TestMessageMalformed: bytes that are not a TaskMessage are an error,
// never a panic.
func TestMessageMalformed(t *testing.T) {
	for i, b := range [][]byte{{0xff}, {0x0a, 0x05, 'a'}, {0x28, 0xff}, {0x2a, 0x01, 'x'}, {0x7a, 0x02, 0x08, 0x01}} {
		if _, err := Decode(b); err == nil {
			t.Errorf("case %d (%x): got no error", i, b)
		}
	}
}

// TestMessageWithPayload: a waiting task's payload and headers replaced in
// its stored message are what asynq's Inspector reads, and every other
// field is kept.
func TestMessageWithPayload(t *testing.T) {
	r := newRig(t)
	id := r.enqueue(t, "codec", "job", asynq.MaxRetry(4), asynq.Retention(time.Hour), asynq.Timeout(time.Minute))
	key := r.sp.Asynq("codec").Task(id)
	ctx := context.Background()
	m, err := Decode([]byte(r.rdb.HGet(ctx, key, "msg").Val()))
	if err != nil {
		t.Fatal(err)
	}
	b := m.WithPayload([]byte("newer"), map[string]string{"b": "2", "c": "3"})
	if err := r.rdb.HSet(ctx, key, "msg", b).Err(); err != nil {
		t.Fatal(err)
	}
	info, err := r.insp.GetTaskInfo(r.sp.Queue("codec"), id)
	if err != nil {
		t.Fatal(err)
	}
	if string(info.Payload) != "newer" || len(info.Headers) != 2 || info.Headers["b"] != "2" || info.Headers["c"] != "3" ||
		info.MaxRetry != 4 || info.Retention != time.Hour || info.Timeout != time.Minute || info.Type != "job" || info.ID != id {
		t.Errorf("after WithPayload: %+v", info)
	}
}
