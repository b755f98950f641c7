// Package shapingtest tests a shaping.HandlerFunc without Redis or a
// dispatcher: Run calls the handler as the dispatcher does (a panic is
// caught) and returns the shaping.Decision the dispatcher would act on:
// complete, throttle (push the bucket back, no attempt consumed), retry or
// archive.
//
//	d := shapingtest.Run(ctx, myHandler, shapingtest.NewTask("billing", []byte(`{"id":7}`)))
//	if d.Action != shaping.Complete { t.Errorf("got %v: %v", d.Action, d.Err) }
package shapingtest

import (
	"context"
	"time"

	"github.com/shaper-io/shaper/shaping"
)

// NewTask is a task as the dispatcher hands it to a handler: ID "test-1",
// the given downstream and payload, cost 1, no retries yet, its slot now.
func NewTask(downstream string, payload []byte) *shaping.Task {
	return &shaping.Task{ID: "test-1", Type: "shaper:task", Payload: payload, Headers: map[string]string{},
		Downstream: downstream, Cost: 1, Slot: time.Now()}
}

// Run calls h on t and classifies the result for a task with t.Retried
// failed attempts and no retry limit, on a downstream without an adaptive
// rate. Use RunWith for a budget or an adaptive rate.
func Run(ctx context.Context, h shaping.HandlerFunc, t *shaping.Task) shaping.Decision {
	return RunWith(ctx, h, t, shaping.Budget{Retried: t.Retried, MaxRetry: -1}, false)
}

// RunWith is Run with the task's retry budget and whether the downstream
// has an adaptive rate.
func RunWith(ctx context.Context, h shaping.HandlerFunc, t *shaping.Task, b shaping.Budget, adaptive bool) shaping.Decision {
	return shaping.Classify(shaping.Call(ctx, h, t), b, adaptive)
}
