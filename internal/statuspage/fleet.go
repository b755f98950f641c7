package statuspage

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
)

// Fleet shares every process's page summary through Redis, so that one
// page shows every process sharing the config: each publishes its own
// every fleetPublish (an HSET and a PEXPIRE) and reads the others' (an
// HGETALL), dropping those not refreshed within fleetStale.
type Fleet struct {
	rdb    redis.UniversalClient
	key    string
	self   ProcessSnapshot // this process's name and address
	last   ProcessSnapshot // its summary as last published
	pubbed time.Time
}

// How often a process publishes its summary, and when an unrefreshed one
// is gone (a process stopped or dead).
const (
	fleetPublish = 2 * time.Second
	fleetStale   = 10 * time.Second
)

// ProcessSnapshot is one process's summary on the fleet's page.
type ProcessSnapshot struct {
	// ID is the process (host:pid), Listen its HTTP address.
	ID     string    `json:"id"`
	Listen string    `json:"listen,omitempty"`
	At     time.Time `json:"at"`
	// Protocol is the version of the shared state it keeps
	// (keys.Protocol); 0 from a build before it was said.
	Protocol int `json:"protocol,omitempty"`
	// Downstreams are its figures by downstream.
	Downstreams map[string]ProcessDownstream `json:"downstreams"`
}

// ProcessDownstream is one process's figures for a downstream.
type ProcessDownstream struct {
	AchievedPerSecond float64 `json:"achieved_per_second"`
	Held              float64 `json:"held"`
	Paused            bool    `json:"paused"`
	// LeasesInUse is the calls in flight it holds a concurrency lease for.
	LeasesInUse float64 `json:"leases_in_use,omitempty"`
	// Why is what holds the downstream's backlog, as this process saw it
	// (shaper ctl explain and GET on a task read it).
	Why *Why `json:"why,omitempty"`
}

// NewFleet returns the fleet of processes under prefix; this one listens
// on listen.
func NewFleet(rdb redis.UniversalClient, prefix, listen string) *Fleet {
	host, _ := os.Hostname()
	return &Fleet{rdb: rdb, key: keys.New(prefix).Fleet(),
		self: ProcessSnapshot{ID: fmt.Sprintf("%s:%d", host, os.Getpid()), Listen: listen, Protocol: keys.Protocol}}
}

// due reports whether this process's summary is due for publishing at now.
func (f *Fleet) due(now time.Time) bool { return now.Sub(f.pubbed) >= fleetPublish }

// exchange publishes s (this process's snapshot; nil: not due, the last
// one stands) and returns the fleet's live processes, this one included,
// by ID.
func (f *Fleet) exchange(ctx context.Context, s *Snapshot, now time.Time) ([]ProcessSnapshot, error) {
	if s != nil {
		me := f.self
		me.At = s.GeneratedAt
		me.Downstreams = map[string]ProcessDownstream{}
		for _, d := range s.Downstreams {
			me.Downstreams[d.Name] = processDownstream(d)
		}
		b, _ := json.Marshal(me)
		_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, f.key, me.ID, b)
			p.PExpire(ctx, f.key, fleetStale)
			return nil
		})
		if err != nil {
			return nil, err
		}
		f.last, f.pubbed = me, s.GeneratedAt
	}
	me := f.last
	live, gone, err := readFleet(ctx, f.rdb, f.key, now)
	if err != nil {
		return nil, err
	}
	out := []ProcessSnapshot{me}
	for _, ps := range live {
		if ps.ID != me.ID {
			out = append(out, ps)
		}
	}
	if len(gone) > 0 {
		f.rdb.HDel(ctx, f.key, gone...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// readFleet reads the summaries published under key: the live ones, and
// the ids of those unreadable or not refreshed within fleetStale.
func readFleet(ctx context.Context, rdb redis.UniversalClient, key string, now time.Time) ([]ProcessSnapshot, []string, error) {
	all, err := rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, nil, err
	}
	var live []ProcessSnapshot
	var gone []string
	for id, v := range all {
		var ps ProcessSnapshot
		if json.Unmarshal([]byte(v), &ps) != nil || now.Sub(ps.At) > fleetStale {
			gone = append(gone, id)
			continue
		}
		live = append(live, ps)
	}
	return live, gone, nil
}

func processDownstream(d DownstreamSnapshot) ProcessDownstream {
	pd := ProcessDownstream{AchievedPerSecond: d.AchievedPerSecond, Held: d.Held, Paused: d.Paused, LeasesInUse: d.LeasesInUse}
	if d.Why.Reason != "" {
		why := d.Why
		pd.Why = &why
	}
	return pd
}

// FleetWhy is what holds downstream ds's backlog as the live process that
// published last saw it (what every process announces in Redis under
// prefix); false when no live process announced it.
func FleetWhy(ctx context.Context, rdb redis.UniversalClient, prefix, ds string, now time.Time) (Why, bool, error) {
	live, _, err := readFleet(ctx, rdb, keys.New(prefix).Fleet(), now)
	if err != nil {
		return Why{}, false, err
	}
	var best Why
	var at time.Time
	for _, ps := range live {
		if pd, ok := ps.Downstreams[ds]; ok && pd.Why != nil && ps.At.After(at) {
			best, at = *pd.Why, ps.At
		}
	}
	return best, !at.IsZero(), nil
}

// fleetDownstream sums d's figures over the fleet's processes, taking
// this process's (self) from d, which is newer than what it published.
func fleetDownstream(fleet []ProcessSnapshot, self string, d DownstreamSnapshot) *FleetDownstream {
	me := processDownstream(d)
	out := &FleetDownstream{Processes: 1, AchievedPerSecond: me.AchievedPerSecond, Held: me.Held, LeasesInUse: me.LeasesInUse}
	for _, p := range fleet {
		pd, ok := p.Downstreams[d.Name]
		if !ok || p.ID == self {
			continue
		}
		out.Processes++
		out.AchievedPerSecond += pd.AchievedPerSecond
		out.Held += pd.Held
		out.LeasesInUse += pd.LeasesInUse
	}
	return out
}

// fleetCells formats the fleet: the header's process count and, per
// downstream, the rate every process achieved together, each one's
// share and what they hold.
func fleetCells(cells map[string]string, s Snapshot) {
	cells["fleet"] = "this process"
	if len(s.Fleet) > 1 {
		cells["fleet"] = fmt.Sprintf("fleet of %d processes (this one %s)", len(s.Fleet), s.Self)
	}
	for _, d := range s.Downstreams {
		k := DownstreamKey(d.Name, "fleet")
		if len(s.Fleet) < 2 {
			cells[k] = "this process only"
			continue
		}
		var sum, held float64
		var parts []string
		for _, p := range s.Fleet {
			pd, ok := p.Downstreams[d.Name]
			if !ok {
				continue
			}
			sum += pd.AchievedPerSecond
			held += pd.Held
			parts = append(parts, fmt.Sprintf("%s %s", p.ID, perSec(pd.AchievedPerSecond)))
		}
		cells[k] = fmt.Sprintf("%s together, held %s · %s", perSec(sum), count(held), strings.Join(parts, ", "))
	}
}

// processRows lists the live processes, this one first: the others as
// the fleet last read them, this one with its figures of now (alone
// without a fleet).
func processRows(s Snapshot) []ProcessRow {
	listen := ""
	var others []ProcessRow
	for _, p := range s.Fleet {
		if p.ID == s.Self {
			listen = p.Listen
			continue
		}
		seen := "seen " + secs(max(s.GeneratedAt.Sub(p.At).Seconds(), 0)) + " ago"
		others = append(others, ProcessRow{ID: p.ID, Text: processText(p.Listen, seen, p.Downstreams)})
	}
	me := map[string]ProcessDownstream{}
	for _, d := range s.Downstreams {
		me[d.Name] = processDownstream(d)
	}
	self := ProcessRow{ID: cmpOr(s.Self, "this process"), Self: true, Text: processText(listen, "serves this page", me)}
	return append([]ProcessRow{self}, others...)
}

// protocolWarning is the page's warning while the live processes keep
// more than one protocol of the shared state; "" otherwise.
func protocolWarning(fleet []ProcessSnapshot) string {
	by := map[int]int{}
	for _, p := range fleet {
		by[max(p.Protocol, 1)]++ // a build before protocols were said kept 1
	}
	if len(by) < 2 {
		return ""
	}
	var parts []string
	for _, pr := range slices.Sorted(maps.Keys(by)) {
		parts = append(parts, fmt.Sprintf("%d on protocol %d", by[pr], pr))
	}
	return fmt.Sprintf("Processes of different shaper versions share this Redis (%s; this build keeps protocol %d): per-key ceilings and caps may not hold until every process is upgraded.",
		strings.Join(parts, ", "), keys.Protocol)
}

// processText is a process's line: its address, when it was heard of,
// and per downstream its achieved rate (or paused) and the tasks it holds.
func processText(listen, seen string, ds map[string]ProcessDownstream) string {
	var parts []string
	if listen != "" && !strings.HasSuffix(listen, ":0") {
		parts = append(parts, listen)
	}
	parts = append(parts, seen)
	for _, name := range sortedKeys(ds) {
		pd := ds[name]
		s := name + " " + perSec(pd.AchievedPerSecond)
		if pd.Paused {
			s = name + " paused"
		}
		if pd.Held > 0 {
			s += ", holds " + count(pd.Held)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " · ")
}
