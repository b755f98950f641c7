package lua

import (
	"context"
	"fmt"
	"time"
)

// LeaseArgs are concurrency.lua's arguments besides its op and members.
// KEYS[1] is the ZSET of leases ("<token>|<key>", scored by expiry in µs),
// KEYS[2] the HASH of in-flight counts per key.
type LeaseArgs struct {
	// Now is ARGV[2]: µs since the epoch; 0 reads Redis TIME.
	Now int64
	// Lease is ARGV[3]: the lease time in µs (acquire, renew).
	Lease int64
	// Cap is ARGV[4]: leases in all (acquire; 0: none).
	Cap int64
	// KeyCap is ARGV[5]: leases per key (0: none; acquire, and with
	// Held every op).
	KeyCap int64
	// Held, with KeyCap, names a fair downstream whose take holds a key's
	// tasks at its cap: each lease that goes brings back as many of its
	// key's held tasks as the key has places (KEYS[3..4], ARGV[6]); nil:
	// none.
	Held *CapHeld
}

// CapHeld is where a fair take holds a key's tasks at its cap on calls
// in flight: fair.lua's held and parked ZSETs, and the TTL of its keys.
type CapHeld struct {
	Held, Parked string
	TTL          time.Duration
}

// AcquireLeases asks for a lease per member, granted in order while there
// is room (a member whose key is at its cap is passed over). granted holds
// 1 or 0 per member; wait is the µs until the earliest lease expires (-1:
// none held).
func (s *Store) AcquireLeases(ctx context.Context, leases, counts string, a LeaseArgs, members []string) (granted []int64, wait int64, err error) {
	v, err := s.leases(ctx, "acquire", leases, counts, a, members)
	if err != nil {
		return nil, 0, err
	}
	if len(v) != len(members)+1 {
		return nil, 0, fmt.Errorf("reply has %d fields, want %d", len(v), len(members)+1)
	}
	return v[:len(members)], v[len(members)], nil
}

// RenewLeases extends members' leases by a.Lease; it returns how many it
// renewed (a lease that expired meanwhile is not revived).
func (s *Store) RenewLeases(ctx context.Context, leases, counts string, a LeaseArgs, members []string) (int64, error) {
	return s.leaseCount(ctx, "renew", leases, counts, a, members)
}

// ReleaseLeases drops members' leases; it returns how many it released.
func (s *Store) ReleaseLeases(ctx context.Context, leases, counts string, a LeaseArgs, members []string) (int64, error) {
	return s.leaseCount(ctx, "release", leases, counts, a, members)
}

func (s *Store) leaseCount(ctx context.Context, op, leases, counts string, a LeaseArgs, members []string) (int64, error) {
	v, err := s.leases(ctx, op, leases, counts, a, members)
	if err != nil {
		return 0, err
	}
	if len(v) != 1 {
		return 0, fmt.Errorf("reply has %d fields, want 1", len(v))
	}
	return v[0], nil
}

// leases runs concurrency.lua; its reply is an integer (renew, release) or
// a list of integers (acquire), returned as a list either way.
func (s *Store) leases(ctx context.Context, op, leases, counts string, a LeaseArgs, members []string) ([]int64, error) {
	args := make([]any, 0, 6+len(members))
	ks, fttl := []string{leases, counts}, int64(0)
	if h := a.Held; h != nil && a.KeyCap > 0 {
		ks, fttl = append(ks, h.Held, h.Parked), max(h.TTL.Milliseconds(), 1)
	}
	args = append(args, op, a.Now, a.Lease, a.Cap, a.KeyCap, fttl)
	for _, m := range members {
		args = append(args, m)
	}
	v, err := concurrency.Run(ctx, s.rdb, ks, args...).Result()
	if err != nil {
		return nil, err
	}
	switch v := v.(type) {
	case int64:
		return []int64{v}, nil
	case []any:
		out := make([]int64, len(v))
		for i, x := range v {
			n, ok := x.(int64)
			if !ok {
				return nil, fmt.Errorf("reply field %d is %T", i, x)
			}
			out[i] = n
		}
		return out, nil
	}
	return nil, fmt.Errorf("reply is %T", v)
}
