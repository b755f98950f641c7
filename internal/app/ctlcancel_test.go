package app_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/app"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/queue"
)

// shaper ctl cancel deletes a task that waits and says what it was; a
// second cancel finds nothing (exit 1, not a usage error).
func TestCtlCancel(t *testing.T) {
	t.Parallel()
	prefix, ctl := ctlOn(t, "  - {name: api, rate: 1/s, handler: {type: log}}\n")
	p := queue.NewProducer(redistest.Client(t), queue.ProducerConfig{Prefix: prefix})
	defer p.Close()
	rc, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Payload: []byte("x"), ProcessAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := ctl("cancel", "api", rc.ID); err != nil || !strings.Contains(out, "cancelled (it was scheduled)") {
		t.Errorf("ctl cancel: %q, %v; want cancelled (it was scheduled)", out, err)
	}
	if _, err := ctl("cancel", "api", rc.ID); !errors.Is(err, queue.ErrNoTask) || errors.Is(err, app.ErrUsage) {
		t.Errorf("second cancel: %v, want queue.ErrNoTask (not a usage error)", err)
	}
	// the ID alone: the downstream that holds it is found
	rc2, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Payload: []byte("y"), ProcessAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := ctl("cancel", rc2.ID); err != nil || !strings.Contains(out, "api: task "+rc2.ID+" cancelled (it was scheduled)") {
		t.Errorf("ctl cancel ID: %q, %v; want api's task cancelled", out, err)
	}
	if _, err := ctl("cancel", rc2.ID); !errors.Is(err, queue.ErrNoTask) {
		t.Errorf("ctl cancel ID again: %v, want queue.ErrNoTask", err)
	}
	if _, err := ctl("cancel", "nope", rc.ID); !errors.Is(err, app.ErrUsage) {
		t.Errorf("cancel of an unknown downstream: %v, want a usage error", err)
	}
}
