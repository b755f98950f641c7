package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/fairindex"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/statuspage"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
)

// shaper ctl explain says why a task is where it is: a scheduled one is
// due at its time; a queued one waits at its priority, with what holds
// its downstream as the live process that announced last saw it (here a
// pause), or says that no process announced; an unknown task is not found.
func TestCtlExplain(t *testing.T) {
	t.Parallel()
	prefix, ctl := ctlOn(t, "  - {name: api, rate: 1/s, priority: {}, handler: {type: log}}\n")
	rdb := redistest.Client(t)
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix, Priority: map[string]int{"api": 0}})
	defer p.Close()
	later, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", ProcessAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := ctl("explain", "api", later.ID); err != nil || !strings.Contains(out, "is scheduled") || !strings.Contains(out, "due at") {
		t.Errorf("explain of a scheduled task: %q, %v", out, err)
	}
	if out, err := ctl("explain", later.ID); err != nil || !strings.Contains(out, "api: task "+later.ID+" is scheduled") {
		t.Errorf("explain ID alone: %q, %v", out, err)
	}
	now, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Priority: 2})
	if err != nil {
		t.Fatal(err)
	}
	out, err := ctl("explain", "api", now.ID)
	if err != nil || !strings.Contains(out, "is pending (priority 2)") || !strings.Contains(out, "unknown (no shaper process") {
		t.Errorf("explain of a queued task, no process: %q, %v", out, err)
	}
	// a process announces that api is paused
	ps := statuspage.ProcessSnapshot{ID: "host:1", At: time.Now(), Downstreams: map[string]statuspage.ProcessDownstream{
		"api": {Paused: true, Why: &statuspage.Why{Reason: statuspage.ReasonPaused, Label: "paused", Text: "nothing is released until it is resumed"}}}}
	b, _ := json.Marshal(ps)
	if err := rdb.HSet(context.Background(), keys.New(prefix).Fleet(), ps.ID, b).Err(); err != nil {
		t.Fatal(err)
	}
	if out, err := ctl("explain", "api", now.ID); err != nil || !strings.Contains(out, "what holds api now: paused: nothing is released") {
		t.Errorf("explain of a queued task while paused: %q, %v", out, err)
	}
	if _, err := ctl("explain", "api", "nope"); !errors.Is(err, queue.ErrNoTask) {
		t.Errorf("explain of an unknown task: %v, want queue.ErrNoTask", err)
	}
}

// A task the take held aside because its key is at its key_concurrency
// is explained so (not as waiting for its key's turn): the take's entry
// in fair order's held set, written here as the take writes it.
func TestCtlExplainKeyAtItsCap(t *testing.T) {
	t.Parallel()
	prefix, ctl := ctlOn(t, "  - {name: api, rate: 1/s, fairness: {}, key_concurrency: 1, handler: {type: log}}\n")
	rdb, ctx := redistest.Client(t), context.Background()
	p := queue.NewProducer(rdb, queue.ProducerConfig{Prefix: prefix, Fair: map[string]queue.FairShare{"api": {Fairness: &fairindex.Fairness{}, Rate: limiters.PerSecond(1)}}})
	defer p.Close()
	var ids []string
	for range 2 {
		r, err := p.Enqueue(ctx, queue.Task{Downstream: "api", Key: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	fk := keys.New(prefix).Fair("api")
	parked, err := rdb.ZRangeWithScores(ctx, fk.Parked, 0, -1).Result()
	if err != nil || len(parked) != 2 {
		t.Fatalf("parked %v, %v; want 2", parked, err)
	}
	for _, z := range parked {
		if m := z.Member.(string); strings.HasSuffix(m, ids[1]) {
			rdb.ZRem(ctx, fk.Parked, m)
			rdb.ZAdd(ctx, fk.Held, redis.Z{Member: fmt.Sprintf("~4|acme|%g|%s", z.Score, m)})
		}
	}
	if out, err := ctl("explain", "api", ids[1]); err != nil || !strings.Contains(out, `key "acme" is at its key_concurrency`) {
		t.Errorf("explain of a task held at its key's cap: %q, %v", out, err)
	}
	if out, err := ctl("explain", "api", ids[0]); err != nil || !strings.Contains(out, "for its key's turn") {
		t.Errorf("explain of a task in fair order: %q, %v", out, err)
	}
}
