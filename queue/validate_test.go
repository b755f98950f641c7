package queue

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/shaping"
)

// A unique key or a type that could never leave Redis intact is refused
// with ErrInvalidTask and a message naming the field and the value.
func TestValidateText(t *testing.T) {
	t.Parallel()
	p := NewProducer(redis.NewClient(&redis.Options{Addr: "unused.invalid:0"}), ProducerConfig{})
	defer p.Close()
	cases := []struct {
		task Task
		msg  string // "" means valid; else a part of the message
	}{
		{Task{UniqueKey: "order 42"}, ""},
		{Task{UniqueKey: "заказ-42 😀"}, ""},
		{Task{UniqueKey: "a\u00a0b"}, ""},
		{Task{Type: "billing:charge v2"}, ""},
		{Task{Type: strings.Repeat("t", MaxTypeLen)}, ""},
		{Task{UniqueKey: "a\nb"}, `unique key "a\nb": control character U+000A at byte 1`},
		{Task{UniqueKey: "a\rb"}, `unique key "a\rb": control character U+000D`},
		{Task{UniqueKey: "a\x00b"}, `unique key "a\x00b": control character U+0000`},
		{Task{UniqueKey: "\tx"}, "control character U+0009 at byte 0"},
		{Task{UniqueKey: "x\x7f"}, "control character U+007F"},
		{Task{UniqueKey: "x\u0085"}, "control character U+0085"},
		{Task{UniqueKey: "x\xff"}, `unique key "x\xff": not valid UTF-8`},
		{Task{UniqueKey: " x"}, "starts or ends with a space"},
		{Task{UniqueKey: "x "}, "starts or ends with a space"},
		{Task{UniqueKey: "   "}, "only white space"},
		{Task{Type: "charge\n"}, `type "charge\n": control character U+000A`},
		{Task{Type: " "}, `type " ": only white space`},
		{Task{Key: "tenant\xff"}, `key "tenant\xff": not valid UTF-8`},
		{Task{Key: "tenant\n7"}, ""},
		{Task{Type: strings.Repeat("t", MaxTypeLen+1)}, "type \"ttt"},
		{Task{Type: strings.Repeat("t", MaxTypeLen+1)}, "is 129 bytes, over the limit of 128"},
	}
	for i, c := range cases {
		c.task.Downstream = "api"
		err := p.Validate(c.task)
		if c.msg == "" {
			if err != nil {
				t.Errorf("case %d: Validate = %v, want nil", i, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidTask) || err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("case %d: Validate = %v, want ErrInvalidTask containing %q", i, err, c.msg)
		}
		if err != nil && strings.ContainsAny(err.Error(), "\r\n\x00") {
			t.Errorf("case %d: the message %q is not one line", i, err)
		}
	}
}

// Every unique key the Producer accepts reaches the downstream as the
// Idempotency-Key, unchanged: enqueued, read back from Redis as the task's
// ID, and sent by the HTTP handler. Each key the Producer refuses is one
// that net/http could not send as it is.
func TestUniqueKeysAreDeliverable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.producer(t, ProducerConfig{})
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
	}))
	defer srv.Close()
	deliver := shaping.HTTPHandler(shaping.HTTPConfig{URL: srv.URL})
	keys := []string{"order 42", "заказ 42", "emoji 😀", "tab\there", "cr\rhere", "lf\nhere", "nul\x00here",
		"del\x7fhere", " lead", "trail ", "c1\u0085", "nbsp\u00a0x", `quote"and\back`, "a:b/c?d#e", "latin1 \xe9"}
	for _, k := range keys {
		rec, err := p.Enqueue(context.Background(), Task{Downstream: "api", UniqueKey: k, Payload: []byte("{}")})
		if err != nil {
			if !errors.Is(err, ErrInvalidTask) {
				t.Errorf("unique key %q: Enqueue = %v, want success or ErrInvalidTask", k, err)
			}
			continue
		}
		info, err := b.in.Asynq().GetTaskInfo(rec.Queue, k)
		if err != nil {
			t.Fatalf("unique key %q: stored task: %v", k, err)
		}
		mu.Lock()
		got = got[:0]
		mu.Unlock()
		if err := deliver(context.Background(), &shaping.Task{ID: info.ID, Downstream: "api", Payload: info.Payload}); err != nil {
			t.Errorf("unique key %q was accepted but cannot be delivered: %v", k, err)
			continue
		}
		mu.Lock()
		if len(got) != 1 || got[0] != k {
			t.Errorf("unique key %q: the downstream got Idempotency-Key %q", k, got)
		}
		mu.Unlock()
	}
}

// queue and shaping share one ErrUnknownDownstream; the Producer's message
// keeps queue's prefix and names the downstream.
func TestUnknownDownstreamIsShared(t *testing.T) {
	t.Parallel()
	p := NewProducer(redis.NewClient(&redis.Options{Addr: "unused.invalid:0"}), ProducerConfig{Downstreams: []string{"api"}})
	defer p.Close()
	err := p.Validate(Task{Downstream: "web"})
	if !errors.Is(err, ErrUnknownDownstream) || !errors.Is(err, shaping.ErrUnknownDownstream) {
		t.Errorf("Validate = %v, want queue.ErrUnknownDownstream and shaping.ErrUnknownDownstream", err)
	}
	if got, want := fmt.Sprint(err), `queue: unknown downstream "web"`; got != want {
		t.Errorf("message = %q, want %q", got, want)
	}
}
