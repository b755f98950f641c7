package redistest

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// CommandStats is INFO commandstats as calls per command ("evalsha",
// "get", …), summed over every master of a cluster. Commands run inside
// scripts count too, as Redis counts them.
type CommandStats map[string]int64

// Total is the sum of all calls.
func (s CommandStats) Total() int64 {
	var n int64
	for _, c := range s {
		n += c
	}
	return n
}

// Sub is s − before, per command (commands only in s keep their count).
func (s CommandStats) Sub(before CommandStats) CommandStats {
	out := CommandStats{}
	for k, v := range s {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// ReadCommandStats reads INFO commandstats from rdb (every master of a
// cluster client).
func ReadCommandStats(ctx context.Context, rdb redis.UniversalClient) (CommandStats, error) {
	out := CommandStats{}
	var mu sync.Mutex // a cluster's masters are read concurrently
	read := func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || !strings.HasPrefix(name, "cmdstat_") {
				continue
			}
			for _, f := range strings.Split(rest, ",") {
				if k, v, _ := strings.Cut(f, "="); k == "calls" {
					var n int64
					if _, err := fmt.Sscan(v, &n); err == nil {
						mu.Lock()
						out[strings.TrimPrefix(name, "cmdstat_")] += n
						mu.Unlock()
					}
				}
			}
		}
		return nil
	}
	if err := eachMaster(ctx, rdb, "ReadCommandStats", read); err != nil {
		return nil, err
	}
	return out, nil
}
