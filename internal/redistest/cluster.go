package redistest

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// LocalCluster is a Redis Cluster of redis-server processes owned by a test:
// masters on free loopback ports, each with its replicas, every node in a
// fresh directory. The shared cluster of a test run (REDIS_CLUSTER_ADDRS,
// started by scripts/cluster.sh) serves ordinary tests; a LocalCluster of its own
// is for tests that stop nodes (failover) or compare topologies
// (benchmarks).
type LocalCluster struct {
	// Masters[i] serves the i-th equal share of the 16384 slots.
	Masters []*Server
	// Replicas[i] are the replicas of Masters[i] (as started; after a
	// failover a replica may have become the master).
	Replicas [][]*Server

	bus map[*Server]int // cluster bus ports (set with --cluster-port)
}

// NodeTimeout is the cluster-node-timeout of a started LocalCluster: how long a
// master must be unreachable before its replica takes over. Short, so a
// failover test takes a few seconds.
const NodeTimeout = time.Second

// StartCluster starts a cluster of masters (at least 3) with replicas
// replicas each, assigns the slots in equal ranges, and returns once every
// node reports cluster_state:ok, knows every other node, and every
// replica's link to its master is up.
func StartCluster(masters, replicas int) (*LocalCluster, error) {
	if masters < 3 {
		return nil, fmt.Errorf("redistest: a cluster needs at least 3 masters, got %d", masters)
	}
	c := &LocalCluster{Replicas: make([][]*Server, masters), bus: map[*Server]int{}}
	ok := false
	defer func() {
		if !ok {
			c.Stop()
		}
	}()
	start := func() (*Server, error) {
		bus, err := FreePort()
		if err != nil {
			return nil, err
		}
		// Start gives every node a fresh directory of its own.
		s, err := Start("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", fmt.Sprint(bus), "--cluster-node-timeout", fmt.Sprint(NodeTimeout.Milliseconds()),
			"--repl-diskless-sync-delay", "0")
		if err == nil {
			c.bus[s] = bus
		}
		return s, err
	}
	for i := 0; i < masters; i++ {
		s, err := start()
		if err != nil {
			return nil, err
		}
		c.Masters = append(c.Masters, s)
		for j := 0; j < replicas; j++ {
			r, err := start()
			if err != nil {
				return nil, err
			}
			c.Replicas[i] = append(c.Replicas[i], r)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.create(ctx); err != nil {
		return nil, err
	}
	if err := c.WaitHealthy(ctx); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

func nodeClient(s *Server) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
}

// create assigns slots, joins the nodes and attaches the replicas, as
// `redis-cli --cluster create` does.
func (c *LocalCluster) create(ctx context.Context) error {
	all := c.Nodes()
	ids := map[*Server]string{}
	for i, s := range all {
		cl := nodeClient(s)
		id, err := cl.Do(ctx, "CLUSTER", "MYID").Text()
		if err == nil {
			// distinct epochs, so the first failover has no epoch collision to resolve
			err = cl.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err()
		}
		cl.Close()
		if err != nil {
			return fmt.Errorf("redistest: cluster setup on %s: %w", s.Addr, err)
		}
		ids[s] = id
	}
	ranges := slotRanges(len(c.Masters))
	for i, m := range c.Masters {
		lo, hi := ranges[i][0], ranges[i][1]
		cl := nodeClient(m)
		err := cl.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err()
		cl.Close()
		if err != nil {
			return fmt.Errorf("redistest: ADDSLOTSRANGE %d %d on %s: %w", lo, hi, m.Addr, err)
		}
	}
	first := nodeClient(all[0])
	defer first.Close()
	for _, s := range all[1:] {
		if err := first.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", s.Port, c.bus[s]).Err(); err != nil {
			return fmt.Errorf("redistest: CLUSTER MEET %s: %w", s.Addr, err)
		}
	}
	if err := c.poll(ctx, "every node to know every node", func(cl *redis.Client) error {
		return infoHas(ctx, cl, fmt.Sprintf("cluster_known_nodes:%d", len(all)))
	}); err != nil {
		return err
	}
	for i, rs := range c.Replicas {
		for _, r := range rs {
			cl := nodeClient(r)
			err := cl.Do(ctx, "CLUSTER", "REPLICATE", ids[c.Masters[i]]).Err()
			cl.Close()
			if err != nil {
				return fmt.Errorf("redistest: CLUSTER REPLICATE on %s: %w", r.Addr, err)
			}
		}
	}
	return nil
}

func infoHas(ctx context.Context, cl *redis.Client, lines ...string) error {
	info, err := cl.Do(ctx, "CLUSTER", "INFO").Text()
	if err != nil {
		return err
	}
	for _, l := range lines {
		if !strings.Contains(info+"\r\n", l+"\r\n") {
			return fmt.Errorf("CLUSTER INFO lacks %s", l)
		}
	}
	return nil
}

// poll runs check on every live node until it passes everywhere.
func (c *LocalCluster) poll(ctx context.Context, what string, check func(*redis.Client) error) error {
	for {
		var err error
		for _, s := range c.Nodes() {
			if !s.Running() {
				continue
			}
			cl := nodeClient(s)
			if e := check(cl); e != nil {
				err = fmt.Errorf("%s: %w", s.Addr, e)
			}
			cl.Close()
			if err != nil {
				break
			}
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: waiting for %s: %w", what, err)
		case <-time.After(50 * time.Millisecond): // poll interval, bounded by ctx
		}
	}
}

// WaitHealthy waits until every running node reports cluster_state:ok with
// every slot served, and every running replica's link to its master is up.
func (c *LocalCluster) WaitHealthy(ctx context.Context) error {
	return c.poll(ctx, "a healthy cluster", func(cl *redis.Client) error {
		if err := infoHas(ctx, cl, "cluster_state:ok", "cluster_slots_ok:16384"); err != nil {
			return err
		}
		rep, err := cl.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if strings.Contains(rep, "role:slave") && !strings.Contains(rep, "master_link_status:up") {
			return fmt.Errorf("replica link down")
		}
		return nil
	})
}

// Nodes lists every node, masters first.
func (c *LocalCluster) Nodes() []*Server {
	all := append([]*Server(nil), c.Masters...)
	for _, rs := range c.Replicas {
		all = append(all, rs...)
	}
	return all
}

// Addrs are the masters' addresses (seeds for a cluster client).
func (c *LocalCluster) Addrs() []string {
	var a []string
	for _, m := range c.Masters {
		a = append(a, m.Addr)
	}
	return a
}

// Client returns a cluster client; the caller closes it.
func (c *LocalCluster) Client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
}

// MasterFor is the index in Masters of the master that served key's slot
// when the cluster started.
func (c *LocalCluster) MasterFor(key string) int {
	return SlotRange(Slot(key), len(c.Masters))
}

// SlotRange is the index of the slot range, of n equal ones, that holds
// slot: the master serving it in a cluster made by StartCluster or by
// `redis-cli --cluster create` with n masters.
func SlotRange(slot uint16, n int) int {
	for i, r := range slotRanges(n) {
		if int(slot) <= r[1] {
			return i
		}
	}
	return n - 1
}

// slotRanges splits the 16384 slots among n masters as redis-cli does
// (3 masters: 0-5460, 5461-10922, 10923-16383).
func slotRanges(n int) [][2]int {
	per := 16384 / float64(n)
	var out [][2]int
	first, cursor := 0, 0.0
	for i := 0; i < n; i++ {
		last := int(math.Round(cursor + per - 1))
		if last > 16383 || i == n-1 {
			last = 16383
		}
		if last < first {
			last = first
		}
		out = append(out, [2]int{first, last})
		first = last + 1
		cursor += per
	}
	return out
}

// Stop kills every node and removes every directory.
func (c *LocalCluster) Stop() {
	for _, s := range c.Nodes() {
		s.Stop()
		s.Cleanup()
	}
}

// Running reports whether the server process was started and not stopped.
func (s *Server) Running() bool { return s.cmd != nil }

// Slot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of the key's
// hash tag (the part between the first '{' and the first '}' after it,
// when not empty) or of the whole key, mod 16384. Tests check it against
// CLUSTER KEYSLOT.
func Slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
