// Package shaping releases queued tasks to their downstreams at a fixed
// rate, globally across every process that shares the Redis.
//
// Each downstream has a bucket: one next_free timestamp in Redis (see
// Buckets). A worker that takes a task reserves a slot with one script call
// (start = max(now, next_free); next_free = start + cost/rate), waits until
// the slot, and then calls the downstream's handler. Slots never overlap,
// so however many workers and processes run, releases never exceed the
// rate; a worker that dies wastes its slot (output dips) and never causes a
// burst.
//
// The Dispatcher runs one asynq server per downstream: its own queue and its
// own worker budget, so a slow or throttled downstream never starves
// another. Waiting for a slot happens while the worker holds the task,
// never through asynq's retry path, so throttling never consumes a retry and
// never archives a task, even one enqueued with MaxRetry(0).
//
// Sizing: a worker holds a task for up to MaxWait before its slot, then for
// the handler's latency L. To keep up with rate R a downstream needs about
// R × (L + a little) workers; more than R × (MaxWait + L) workers only hold
// tasks that cannot get a slot yet.
package shaping
