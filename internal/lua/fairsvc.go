package lua

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

var fairSvc = script("fairsvc.lua")

// FairService adds one process's service increments (units per weight
// served since its last call, by admission key) to the keys' attained
// service shared in HASH svc, fading with time constant tau, and returns
// the service of the keys in want, in the same units, in order. A key in
// lifted that svc does not hold (or holds faded out) starts at its lifted
// service. nowMs is the script's time in ms since the epoch; 0 reads
// Redis TIME.
func (s *Store) FairService(ctx context.Context, svc string, tau time.Duration, nowMs int64, inc, lifted map[string]float64, want []string) ([]float64, error) {
	n := len(inc)
	for k := range lifted {
		if _, ok := inc[k]; !ok {
			n++
		}
	}
	args := make([]any, 0, 3+3*n+len(want))
	args = append(args, tau.Milliseconds(), nowMs, n)
	for k, v := range inc {
		args = append(args, k, strconv.FormatFloat(v, 'g', 6, 64), strconv.FormatFloat(lifted[k], 'g', 6, 64))
	}
	for k, v := range lifted {
		if _, ok := inc[k]; !ok {
			args = append(args, k, "0", strconv.FormatFloat(v, 'g', 6, 64))
		}
	}
	for _, k := range want {
		args = append(args, k)
	}
	v, err := fairSvc.Run(ctx, s.rdb, []string{svc}, args...).Int64Slice()
	if err != nil && err != redis.Nil {
		return nil, err
	}
	if len(v) != len(want) {
		return nil, fmt.Errorf("fairsvc: reply has %d fields, want %d", len(v), len(want))
	}
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x) / 1000
	}
	return out, nil
}
