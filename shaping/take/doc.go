// Package take releases tasks to downstreams with this rule: a task leaves
// its queue only when its slot is reserved (DESIGN invariants 11 and 12).
//
// # What it owns
//
// An Engine serves every downstream added to it from one loop per process,
// with no asynq.Server. For each downstream it owns, on the downstream's
// asynq queue (keys.Space.Queue): taking (asynq's dequeue), the leases of
// the tasks it took, finishing them (done, completed, retry, archive,
// requeue), forwarding due scheduled and retry tasks to pending, and
// recovering tasks whose lease expired. asynq's storage stays the system of
// record: asynq.Client enqueues, and asynq.Inspector and asynqmon show each
// task as pending, active, retry, archived or completed, with asynq's
// counters. Do not run an asynq.Server on a queue an Engine serves: it
// would dequeue without a slot, and its recoverer would race the engine's
// (see Recovery).
//
// # The scripts (lua/, run by internal/lua)
//
//   - take.lua, once per LookAhead·Rate releases or so: on the Redis clock,
//     it reserves consecutive slots on the downstream's bucket (shaping.lua's
//     next_free format, under keys.Space.Bucket in the queue's hash
//     tag) that start within the look-ahead, at most as many as the budget
//     of unexpired leases leaves room for, and moves one pending task to
//     active under a lease per slot, exactly as asynq's dequeue does. When
//     nothing may go (paused, budget spent, next slot beyond the
//     look-ahead, queue empty) nothing moves and the reply says which, and
//     when the next slot enters the look-ahead. With Downstream.Reserve
//     the slots are shaping.lua's reservation (prelude_reserve.lua: the
//     rate, the quotas, the announced limit), made for the run of
//     one-unit tasks at the tail of pending, once the next slot is within
//     a third of the look-ahead.
//   - take_done.lua, take_fail.lua, take_requeue.lua: asynq v0.26's doneCmd
//     / markAsCompleteCmd (with the unique lock), retryCmd / archiveCmd
//     (with asynq's archive trimming and daily counters) and requeueCmd,
//     each guarded by the task still being active.
//   - take_hold.lua: a fair task whose handler returned Hold (its key was
//     paused before the call) leaves active for its key's held set in the
//     fair order, as take.lua puts a paused key's task it meets there.
//   - take_extend.lua: lease extension on the Redis clock.
//
// The engine decodes asynq's TaskMessage with protowire (internal/asynqmsg) and
// rewrites only retried, error_msg, last_failed_at and completed_at,
// keeping every other field's bytes.
//
// # Loop, budget and cost
//
// The loop calls take.lua for a downstream when its next check is due and
// this process holds fewer than InFlight of its tasks; each task's job
// sleeps until its slot, calls the handler and finishes the task. The
// budget counts tasks leased across every process, taken or in a call, so
// a paused or throttled downstream holds at most InFlight active tasks,
// and it must cover Rate × (LookAhead + call time) to keep up. A
// downstream whose queue is empty is probed with one LLEN (all probes of a
// tick in one pipeline), soon after it emptied and backing off to
// IdlePoll; every Maintain its check is a take that also forwards and
// recovers. Wake skips the wait when a producer in the process knows of
// new work.
//
// # Leases and recovery
//
// A task taken is in asynq's lease ZSET (score: expiry in Unix seconds),
// extended every Config.Extend while this process holds it. A take with
// maintenance puts a task whose lease expired back at the head of pending,
// with no attempt consumed: it belonged to a process that stopped without
// finishing it, and at most its InFlight tasks are delivered twice. The
// engine owns recovery for its queues. asynq's recoverer would also find
// them, 30s after expiry, but only an asynq.Server serving the queue runs
// one, and it would retry them with an attempt consumed: hence the rule
// above. A finishing write finds a recovered task inactive and writes
// nothing (Stats.Lost).
//
// # Measured
//
// On one redis-server (TestTakeIdleCost, BenchmarkTakeBacklog): an idle
// engine costs 2.0 commands/s per downstream (1 LLEN per IdlePoll, a
// maintenance take per Maintain) and 7 connections, at 100 and at 1,000
// downstreams; an asynq.Server per downstream cost 11 commands/s and more
// than one connection per downstream. Draining a backlog costs 13.3
// commands per release unthrottled, 13.5 at 2,000/s, and 13.9 and 14.5
// with 3 engines at 200 and 1,000/s; raw asynq costs 14.0 on the same
// backlog.
//
// # In shaper
//
// shaping.Dispatcher runs one Engine per process for every downstream but
// batching ones (asynq's group aggregator runs only inside an
// asynq.Server). It adds each downstream with Rate 0, InFlight its
// workers, BudgetNow workers per live process, a Gate (pause, open
// breaker, a pushback hold) and Malformed (shaper's quarantine). A FIFO,
// priority or fair downstream also has Reserve: each take reserves the
// slots of the tasks it moves on the downstream's bucket (rate, quotas,
// announced limit), in the same script; a fair one has Ceiling too (its
// per-key ceilings), and one with a concurrency cap Leases (a place
// among the calls per task). The others (a per-key concurrency cap,
// fair order with priorities, a key_rates map of more than 256 keys)
// have Want (the engine takes what keeps about 200ms of releases
// waiting), and their bucket (shaping.lua) decides each slot after the
// take.
//
// # Pickers
//
// Which task a take moves is decided in take.lua at the take: pending in
// FIFO order; with Priority, the priority lists strictly or by weight;
// with Fair, pending and then the parked task with the least start tag
// (weighted fair order among admission keys, fair.lua's index), so a key
// that arrives under a backlog is taken at the next take; with Fair and
// Ceiling, passing over a key at its ceiling.
//
// # Left to do
//
// Reserving at the take under a per-key concurrency cap, for fair order
// with priorities and for a long key_rates map
// (their lanes still reserve after the take, and a fair lane orders the
// tasks it holds), and group aggregation (batching downstreams keep an
// asynq.Server).
package take
