// Package lua is shaper's one Redis store: every Lua script, embedded from
// the .lua file beside this one, behind one typed method of Store with
// named arguments and a checked reply. Nothing outside this package knows
// an ARGV position, a mode number or a reply's layout. Each .lua file's
// header states its KEYS, ARGV and reply; the method's comment names the
// same contract in Go terms.
//
// Every script reads Redis TIME unless handed an explicit now (tests only;
// 0 means Redis TIME), sets a TTL on every key it writes, and touches only
// keys that share the hash tag of KEYS[1]. Scripts run with Script.Run,
// which tries EVALSHA and falls back to EVAL.
package lua

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/clock"
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
	//go:embed quarantine.lua
	quarantineSrc string
	//go:embed concurrency.lua
	concurrencySrc string
)

var (
	fixedWindow       = redis.NewScript(fixedWindowSrc)
	slidingLog        = redis.NewScript(slidingLogSrc)
	slidingCounter    = redis.NewScript(slidingCounterSrc)
	slidingSubwindows = redis.NewScript(slidingSubwindowsSrc)
	tokenBucket       = redis.NewScript(tokenBucketSrc)
	leakyBucket       = redis.NewScript(leakyBucketSrc)
	shaping           = redis.NewScript(shapingSrc)
	control           = redis.NewScript(controlSrc)
	adaptive          = redis.NewScript(adaptiveSrc)
	recoverScript     = redis.NewScript(recoverSrc)
	quarantine        = redis.NewScript(quarantineSrc)
	concurrency       = redis.NewScript(concurrencySrc)
)

// The ARGV[4] mode of the admission and shaping scripts.
const (
	modeCharge = 0 // decide and, when allowed, charge (shaping: reserve)
	modePeek   = 1 // decide, write nothing
	modeRefund = 2 // give back a charge (admission) / push back (shaping)
	modeReset  = 3 // shaping only: forget next_free
)

// Store runs shaper's scripts on one Redis client (a *redis.Client,
// *redis.ClusterClient or *redis.Ring). Safe for concurrent use.
type Store struct {
	rdb redis.Scripter
}

// New returns a Store on rdb.
func New(rdb redis.Scripter) *Store { return &Store{rdb: rdb} }

// ints runs sc and checks that its reply is a list of want integers.
func (s *Store) ints(ctx context.Context, sc *redis.Script, keys []string, want int, args ...any) ([]int64, error) {
	v, err := sc.Run(ctx, s.rdb, keys, args...).Int64Slice()
	if err == nil && len(v) != want {
		err = fmt.Errorf("reply has %d fields, want %d", len(v), want)
	}
	return v, err
}

// NowArg is the explicit now (µs since the epoch) a script is handed under
// clk: 0, so the script reads Redis TIME, for nil and clock.Real (every
// production process); a test's fake clock's Now otherwise. It is the one
// place that rule lives (DESIGN invariant 6).
func NowArg(clk clock.Clock) int64 {
	if clock.IsReal(clk) {
		return 0
	}
	return clk.Now().UnixMicro()
}
