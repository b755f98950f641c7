package queue_test

import (
	"context"
	"testing"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/queue"
)

func TestBacklogOfAQueueNeverWritten(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t)
	in := queue.NewInspector(rdb, prefix)
	b, err := in.Backlog("never-used")
	if err != nil || b.Total() != 0 || b.Downstream != "never-used" {
		t.Fatalf("Backlog of an unused queue = %+v, %v; want an empty backlog", b, err)
	}
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix})
	defer p.Close()
	if _, err := p.Enqueue(context.Background(), queue.Task{Downstream: "used", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if b, err := in.Backlog("used"); err != nil || b.Pending != 1 {
		t.Fatalf("Backlog after one enqueue = %+v, %v; want 1 pending", b, err)
	}
}
