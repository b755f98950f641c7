// Package lua is shaper's one Redis store: every Lua script of package
// github.com/shaper-io/shaper/lua (after the preludes it names, see
// script), behind one typed method of Store with named arguments and a
// checked reply. Nothing outside this package knows an ARGV position, a
// mode number or a reply's layout. Each .lua file's header states its
// KEYS, ARGV and reply; the method's comment names the same contract in
// Go terms.
//
// Every script reads Redis TIME unless handed an explicit now (tests only;
// 0 means Redis TIME), sets a TTL on every key it writes, and touches only
// keys that share the hash tag of KEYS[1]. Scripts run with Script.Run,
// which tries EVALSHA and falls back to EVAL.
package lua

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/clock"
	scripts "github.com/shaper-io/shaper/lua"
)

// script is the concatenation of the named files of package lua, preludes
// first: Redis runs one source per script, and a prelude lets a rule
// (reading the clock, the shared admission arguments) live once. A name
// that package lua does not embed panics when this package initialises.
func script(files ...string) *redis.Script {
	var b strings.Builder
	for _, f := range files {
		b.WriteString(scripts.Source(f))
	}
	return redis.NewScript(b.String())
}

// admissionScript is an admission script after its two preludes.
func admissionScript(file string) *redis.Script {
	return script("prelude_clock.lua", "prelude_admission.lua", file)
}

var (
	fixedWindow       = admissionScript("fixed_window.lua")
	slidingLog        = admissionScript("sliding_log.lua")
	slidingCounter    = admissionScript("sliding_counter.lua")
	slidingSubwindows = admissionScript("sliding_subwindows.lua")
	tokenBucket       = admissionScript("token_bucket.lua")
	leakyBucket       = admissionScript("leaky_bucket.lua")
	adaptive          = script("prelude_clock.lua", "adaptive.lua")
	shaping           = script("prelude_reserve.lua", "shaping.lua")
	control           = script("control.lua")
	recoverScript     = script("recover.lua")
	quarantine        = script("quarantine.lua")
	concurrency       = script("prelude_capheld.lua", "concurrency.lua")
	breaker           = script("prelude_clock.lua", "breaker.lua")
	answer            = script("prelude_clock.lua", "answer.lua")
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
