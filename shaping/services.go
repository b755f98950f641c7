package shaping

import (
	"log/slog"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/fairindex"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/lua"
	"github.com/shaper-io/shaper/internal/metrics"
	"github.com/shaper-io/shaper/shaping/take"
)

// services are what a Dispatcher's parts share: its config, its Redis
// client and stores, its metrics and log, its stop signal, the engine and
// the count of live processes. The Dispatcher holds them, and each
// downstream's runner is handed them: a runner reaches nothing else of the
// Dispatcher.
type services struct {
	rdb      redis.UniversalClient
	store    *lua.Store // recovery, quarantine and breaker scripts
	cfg      Config
	space    keys.Space
	buckets  *Buckets
	fair     *FairQueue
	log      *slog.Logger
	alog     *logThrottle // asynq's repeated warnings, shared by every server
	m        *metrics.Metrics
	stopping chan struct{}
	// notices: a change of some downstream's runtime state was announced
	// (the engine follows the control channel); the control loop reads
	// the versions on its next tick
	notices chan struct{}
	// fleet: a process announced that it joined or left the fleet; the
	// liveness loop counts the live processes at once
	fleet   chan struct{}
	control *Control
	eng     *take.Engine // serves every downstream but batching ones
	// trouble: an asynq script call failed on the network since the
	// liveness loop last looked (asynqClient)
	trouble atomic.Bool
	procs   atomic.Int64 // live processes at the last announce (0: not yet known)
}

// FairQueue parks fair downstreams' tasks in weighted fair order
// (fair.lua), which the dispatchers' takes pick from. Producers park;
// dispatchers feed due tasks and exchange service. Safe for concurrent use.
type FairQueue = fairindex.Queue
