package httpapi_test

import (
	"testing"

	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// The 202 of a fair downstream's task says where asynq holds it: pending
// when it went to the queue at once, scheduled with fair_turn while it
// waits in fair order for its key's turn (no dispatcher runs here, so at
// 1/s the first two of a key go to the queue and the rest wait); GET on a
// waiting one agrees.
func TestAcceptedFairTaskState(t *testing.T) {
	t.Parallel()
	b := setup(t, options{fair: map[string]queue.FairShare{"api": {Fairness: &shaping.Fairness{}, Rate: limiters.PerSecond(1)}}})
	var states []string
	var waiting string
	for range 4 {
		r := b.post(t, "/v1/downstreams/api/tasks", `{"payload":1,"key":"acme"}`)
		if r.status != 202 {
			t.Fatalf("POST: %d %s", r.status, r.raw)
		}
		st, _ := r.body["state"].(string)
		turn, _ := r.body["fair_turn"].(bool)
		if turn != (st == "scheduled") {
			t.Errorf("202 %s: fair_turn %v with state %q", r.raw, turn, st)
		}
		states = append(states, st)
		if turn {
			waiting, _ = r.body["id"].(string)
		}
	}
	if states[0] != "pending" || states[3] != "scheduled" || waiting == "" {
		t.Fatalf("202 states %v, want the first pending and the last scheduled (waiting for its turn)", states)
	}
	if r := b.do(t, "GET", "/v1/downstreams/api/tasks/"+waiting, nil); r.status != 200 || r.body["state"] != "scheduled" {
		t.Errorf("GET the waiting task: %d %s, want scheduled as the 202 said", r.status, r.raw)
	}
}
