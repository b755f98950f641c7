package lua

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"time"
)

var keyRates = script("keyrates.lua")

// KeyRatesVersion is the version EnsureKeyRates writes for intervals: a
// digest of the map, the same in every process that holds the same map.
func KeyRatesVersion(intervals map[string]time.Duration) string {
	h := fnv.New64a()
	for _, k := range slices.Sorted(maps.Keys(intervals)) {
		fmt.Fprintf(h, "%d|%s%d;", len(k), k, intervals[k].Microseconds())
	}
	return strconv.FormatUint(h.Sum64(), 36)
}

// EnsureKeyRates makes the HASH key (keyrates.lua; a fair downstream's
// TakeCeiling.Rates) hold intervals, the keys' intervals for one unit of
// cost, under version (KeyRatesVersion), and renews its TTL: one short
// call when it holds them already, and the whole map, written at once,
// when it does not. written reports the second.
func (s *Store) EnsureKeyRates(ctx context.Context, key, version string, ttl time.Duration, intervals map[string]time.Duration) (written bool, err error) {
	ms := max(ttl.Milliseconds(), 1)
	ok, err := keyRates.Run(ctx, s.rdb, []string{key}, version, ms).Int64()
	if err != nil || ok == 1 {
		return false, err
	}
	args := make([]any, 0, 2+2*len(intervals))
	args = append(args, version, ms)
	for k, iv := range intervals {
		args = append(args, k, max(iv.Microseconds(), 1))
	}
	if _, err := keyRates.Run(ctx, s.rdb, []string{key}, args...).Int64(); err != nil {
		return false, err
	}
	return true, nil
}
