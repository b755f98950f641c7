package httpapi_test

import (
	"testing"

	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// The 202 of a fair downstream's task says where asynq holds it:
// pending, with fair_turn, while it waits in fair order for a take to
// pick it (no dispatcher runs here); GET on a waiting one agrees.
func TestAcceptedFairTaskState(t *testing.T) {
	t.Parallel()
	b := setup(t, options{fair: map[string]queue.FairShare{"api": {Fairness: &shaping.Fairness{}, Rate: limiters.PerSecond(1)}}})
	var waiting string
	for range 4 {
		r := b.post(t, "/v1/downstreams/api/tasks", `{"payload":1,"key":"acme"}`)
		if r.status != 202 {
			t.Fatalf("POST: %d %s", r.status, r.raw)
		}
		st, _ := r.body["state"].(string)
		turn, _ := r.body["fair_turn"].(bool)
		if !turn || st != "pending" {
			t.Errorf("202 %s: fair_turn %v with state %q, want true and pending", r.raw, turn, st)
		}
		waiting, _ = r.body["id"].(string)
	}
	if r := b.do(t, "GET", "/v1/downstreams/api/tasks/"+waiting, nil); r.status != 200 || r.body["state"] != "pending" {
		t.Errorf("GET the waiting task: %d %s, want pending as the 202 said", r.status, r.raw)
	}
}
