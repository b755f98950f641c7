// Package lua holds shaper's Redis Lua scripts, embedded from the .lua files
// beside this one. Each file's header states its KEYS, ARGV and reply; the
// scripts run with Script.Run, which tries EVALSHA and falls back to EVAL.
//
// Every script reads Redis TIME unless handed an explicit now (tests only),
// sets a TTL on every key it writes, and touches only keys that share the
// hash tag of KEYS[1].
package lua

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed fixed_window.lua
	fixedWindowSrc string
	//go:embed sliding_log.lua
	slidingLogSrc string
	//go:embed sliding_counter.lua
	slidingCounterSrc string
	//go:embed sliding_subwindows.lua
	slidingSubwindowsSrc string
	//go:embed token_bucket.lua
	tokenBucketSrc string
	//go:embed leaky_bucket.lua
	leakyBucketSrc string
	//go:embed shaping.lua
	shapingSrc string
	//go:embed control.lua
	controlSrc string
	//go:embed adaptive.lua
	adaptiveSrc string
	//go:embed recover.lua
	recoverSrc string
	//go:embed concurrency.lua
	concurrencySrc string
	//go:embed quarantine.lua
	quarantineSrc string
)

// Admission scripts share one ARGV layout:
// {limit|capacity, window|rate, cost, mode, now, refund token}, and reply
// {allowed, remaining, retry_after_us, reset_after_us, refund token, ...}.
var (
	// FixedWindow: KEYS[1] base of STRING counters (window number appended).
	FixedWindow = redis.NewScript(fixedWindowSrc)
	// SlidingLog: KEYS[1] ZSET of admitted units scored by time.
	SlidingLog = redis.NewScript(slidingLogSrc)
	// SlidingCounter: KEYS[1] base of two STRING counters (N, N-1).
	SlidingCounter = redis.NewScript(slidingCounterSrc)
	// SlidingSubwindows: KEYS[1] HASH, a field per sub-window number;
	// ARGV[7] the number of sub-windows per window.
	SlidingSubwindows = redis.NewScript(slidingSubwindowsSrc)
	// TokenBucket: KEYS[1] HASH {t, ts}, fixed-point amounts.
	TokenBucket = redis.NewScript(tokenBucketSrc)
	// LeakyBucket: KEYS[1] HASH {l, ts}, policing mode, fixed-point amounts.
	LeakyBucket = redis.NewScript(leakyBucketSrc)
	// Shaping: KEYS[1] STRING next_free. ARGV {interval_us, burst_us,
	// max_wait_us, mode, now, slots}; reply {reserved slots, wait_us,
	// next_free_us, now_us, base_us}.
	Shaping = redis.NewScript(shapingSrc)
	// Control: KEYS[1] HASH of a downstream's runtime state. ARGV {ttl_ms,
	// field, value, …}; reply: fields in the hash.
	Control = redis.NewScript(controlSrc)
	// Adaptive: KEYS[1] the same HASH. AIMD of the shared rate; reply: the
	// rate in milli-units per second.
	Adaptive = redis.NewScript(adaptiveSrc)
	// Recover: KEYS asynq's lease, active, pending of one queue. Returns
	// a dead process's held tasks to the front of the queue; reply
	// {moved, dropped}.
	Recover = redis.NewScript(recoverSrc)
	// Concurrency: KEYS a downstream's lease ZSET and per-key count HASH.
	// ARGV {op, now, lease_us, cap, key_cap, members...}; leases for calls
	// in flight across every process.
	Concurrency = redis.NewScript(concurrencySrc)
	// Quarantine: KEYS[1..8] a task HASH and its asynq queue's pending,
	// active, scheduled, retry, archived, lease and completed; KEYS[9] the
	// quarantine LIST. ARGV {id, reason, judged msg, max entries, ttl_ms,
	// max msg bytes}; reply: structures the id left, 0 if it changed.
	Quarantine = redis.NewScript(quarantineSrc)
)

// Modes for ARGV[4].
const (
	ModeCharge = 0 // decide and, when allowed, charge
	ModePeek   = 1 // decide, write nothing
	ModeRefund = 2 // give back a charge (admission) / push back (shaping)
	ModeReset  = 3 // shaping only: forget next_free
)

// All lists every script, for loading on every node of a cluster.
func All() []*redis.Script {
	return []*redis.Script{FixedWindow, SlidingLog, SlidingCounter, SlidingSubwindows, TokenBucket, LeakyBucket, Shaping, Control, Adaptive, Recover, Quarantine, Concurrency}
}
