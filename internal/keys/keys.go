// Package keys builds every Redis key name shaper writes, in one place.
//
// Each key family carries a {hash tag} so that all keys one Lua script
// touches land on one Redis Cluster slot. Scripts that derive further keys
// (a window number appended to a base key) only ever append to a key built
// here, so the derived key keeps the same hash tag.
package keys

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// NamePattern is the rule for a downstream name: it becomes the asynq queue
// name and a part of every key of the downstream, so it has no spaces,
// braces or colons; and "." and ".." are refused (CheckName), since they
// are path elements in the URLs that carry a name
// (/v1/downstreams/NAME/tasks). NameRule says it in words, for error
// messages.
const (
	NamePattern = `^[A-Za-z0-9_.-]{1,64}$`
	NameRule    = "1-64 of [A-Za-z0-9_.-], not only dots"
)

var nameRE = regexp.MustCompile(NamePattern)

// ValidName reports whether s is a valid downstream name (CheckName).
func ValidName(s string) bool { return CheckName(s) == "" }

// CheckName says what is wrong with s as a downstream (or cron job) name,
// or "" when nothing is: the one rule the config file, the dispatcher,
// the producer and the take engine apply.
func CheckName(s string) string {
	switch {
	case s == "":
		return "required"
	case s == "." || s == "..":
		return fmt.Sprintf("invalid name %q (a name of only dots is a path element, not a name)", s)
	case !nameRE.MatchString(s):
		return fmt.Sprintf("invalid name %q (want %s)", s, NameRule)
	}
	return ""
}

// DefaultPrefix is the prefix used when none is configured.
const DefaultPrefix = "shaper"

// Space builds key names under one prefix. The zero value uses DefaultPrefix.
type Space struct {
	// Prefix must match [A-Za-z0-9._-]+ (internal/config enforces it): the
	// queue name starts with it and asynq uses the queue name as its hash
	// tag, so a brace here would move or empty asynq's tag on a cluster.
	Prefix string
}

// New returns a Space for prefix ("" means DefaultPrefix).
func New(prefix string) Space { return Space{Prefix: prefix} }

func (s Space) prefix() string {
	if s.Prefix == "" {
		return DefaultPrefix
	}
	return s.Prefix
}

// tag wraps parts in a hash tag. The tag always starts with a non-empty
// family marker, so a user key that begins with '}' cannot produce an empty
// tag (Redis hashes the whole key name when the tag is empty, which would
// split a script's keys across slots).
func tag(family, name, key string) string {
	return "{" + family + ":" + name + ":" + key + "}"
}

// Limiter is the base key of admission limiter name for the admission key
// key, for algorithm alg ("fw", "swl", "swc", "tb", "lb").
//
// Types: fw and swc append ":<window number>" inside the script (STRING
// counters); swl is a ZSET; tb and lb are HASHes.
func (s Space) Limiter(alg, name, key string) string {
	return s.prefix() + ":lim:" + tag(alg, name, key)
}

// SubWindows is the HASH of limiter name's sliding counter over n
// sub-windows for the admission key key, a field per sub-window number.
// n is part of the tag's family ("swc60"), so a limiter whose n changes
// starts afresh instead of misreading fields numbered for another n.
func (s Space) SubWindows(n int, name, key string) string {
	return s.prefix() + ":lim:" + tag("swc"+strconv.Itoa(n), name, key)
}

// ds is the base of every key of downstream ds. Its hash tag is the queue
// name, the tag of asynq's own keys ("asynq:{<queue>}:…"), so that one
// script takes a task from asynq's lists and reserves its slot, quotas and
// announced limit on one cluster slot. Keys of an earlier layout
// (LegacyDownstream) hashed by "{ds:<name>:}".
func (s Space) ds(ds string) string {
	return s.prefix() + ":ds:{" + s.Queue(ds) + "}"
}

// Bucket is the shaping bucket of downstream ds: a STRING holding next_free
// in microseconds since the Unix epoch, shared by the take (take.lua) and
// every lane's reservation (shaping.lua).
func (s Space) Bucket(ds string) string {
	return s.ds(ds) + ":next_free"
}

// DownstreamState is a HASH of runtime control for downstream ds
// (paused flag, rate override, adaptive rate). Same slot as its bucket.
func (s Space) DownstreamState(ds string) string {
	return s.ds(ds) + ":state"
}

// Leases is the ZSET of leases for calls in flight to downstream ds
// (member "<token>|<admission key>", score: expiry in µs). Same slot as
// its bucket.
func (s Space) Leases(ds string) string {
	return s.ds(ds) + ":leases"
}

// LeaseCounts is the HASH of calls in flight per admission key of
// downstream ds (for a per-key concurrency cap). Same slot as Leases.
func (s Space) LeaseCounts(ds string) string {
	return s.ds(ds) + ":lease_counts"
}

// Breaker is the HASH of downstream ds's circuit breaker: its state, the
// cool-down, the half-open probe pace and the sliding window's call and
// error counts per bucket. Same slot as its bucket.
func (s Space) Breaker(ds string) string {
	return s.ds(ds) + ":breaker"
}

// Quota is the HASH of one release quota of downstream ds: units used,
// a field per window number (aligned windows) or sub-window number
// (sliding windows). shape names the quota's period, alignment and
// sub-window length (digits, letters and '_' only), so a quota whose shape
// changes starts afresh instead of misreading fields numbered for
// another. Same slot as its bucket.
func (s Space) Quota(ds, shape string) string {
	return s.ds(ds) + ":quota:" + shape
}

// Announced is the HASH of the limit downstream ds's answers announced
// (RateLimit, X-RateLimit-* or Retry-After headers): units left in the
// announced window, when it resets, and which answer said so. Same slot as
// its bucket.
func (s Space) Announced(ds string) string {
	return s.ds(ds) + ":announced"
}

// Issued is the STRING count of units reserved on downstream ds's bucket,
// so that an answer can tell how many units were reserved after its own
// (the downstream had not seen those when it counted what was left). Same
// slot as its bucket.
func (s Space) Issued(ds string) string {
	return s.ds(ds) + ":issued"
}

// PriorityClaims is the HASH of downstream ds's priority claims (level
// -> until, µs): a process whose waiters of a high priority found no slot
// keeps the others' lower ones from reserving (shaping.lua). Same slot as
// its bucket.
func (s Space) PriorityClaims(ds string) string {
	return s.ds(ds) + ":claims"
}

// KeyCeiling is the STRING tat of admission key key under downstream ds's
// per-key ceiling: the earliest slot start (µs since the epoch, on the
// Redis clock) its next release may take. Same slot as its bucket, so a
// key's ceiling and the bucket live on one node and one clock.
func (s Space) KeyCeiling(ds, key string) string {
	return s.ds(ds) + ":kc:" + key
}

// Moved is a key of a downstream whose name changed with the layout:
// Old is its name when the downstream's keys hashed by "{ds:<name>:}",
// New its name now.
type Moved struct{ Old, New string }

// LegacyDownstream lists downstream ds's keys that hold state worth
// carrying over from that layout: its runtime state (pause, rate
// override, adaptive rate), breaker, bucket (a pushback may hold it for
// hours), announced limit and one quota HASH per shape. The leases,
// claims and key ceilings hold seconds of state and start afresh.
func (s Space) LegacyDownstream(ds string, shapes ...string) []Moved {
	old := s.legacyDS(ds)
	out := []Moved{{old + ":state", s.DownstreamState(ds)}, {old + ":breaker", s.Breaker(ds)},
		{s.LegacyBucket(ds), s.Bucket(ds)}, {old + ":announced", s.Announced(ds)}}
	for _, sh := range shapes {
		out = append(out, Moved{old + ":quota:" + sh, s.Quota(ds, sh)})
	}
	return out
}

// LegacyBucket is downstream ds's bucket as a process of the layout
// before LegacyDownstream's writes it: while it exists, such a process is
// releasing, on a bucket of its own.
func (s Space) LegacyBucket(ds string) string { return s.legacyDS(ds) + ":next_free" }

func (s Space) legacyDS(ds string) string { return s.prefix() + ":ds:" + tag("ds", ds, "") }

// ControlVersions is a HASH of downstream name → a counter bumped on
// every change of that downstream's runtime state, so each process reads
// one key per control tick and the state hashes only when they changed.
// One key for all downstreams: it is read with one plain command, never
// from a script, so it needs no hash tag.
func (s Space) ControlVersions() string {
	return s.prefix() + ":ctl:versions"
}

// ControlChannel is the pub/sub channel on which every change of a
// downstream's runtime state is announced (the message is its name), so
// processes read the versions hash when something changed instead of on
// every control tick. A channel, not a key: it needs no hash tag.
func (s Space) ControlChannel() string {
	return s.prefix() + ":ctl:changes"
}

// ProcessesChannel is the pub/sub channel on which a dispatcher process says
// it joined or left the fleet, so the others count the live processes
// (Processes) at once instead of at their next announce. A channel, not a
// key: it needs no hash tag.
func (s Space) ProcessesChannel() string {
	return s.prefix() + ":procs:changes"
}

// Processes is a ZSET of the live dispatcher processes (member:
// ProcessMember, score: unix seconds of its last announcement), read with
// plain commands: a process silent for a while is dead, and the others
// recover the tasks it held.
func (s Space) Processes() string {
	return s.prefix() + ":procs"
}

// Protocol is the version of the state in Redis that this build's
// processes share: processes of two protocols do not keep each other's
// rules (an earlier one ignores tasks a later one holds aside, or
// honours claims no process writes any more), so a rolling upgrade
// across a change of it must upgrade every process together. CHANGELOG
// says when it changes; each process says its own in Processes.
const Protocol = 2

// protocolMark separates a process's id from its protocol in its member.
const protocolMark = "~p"

// ProcessMember is process id's member of Processes: the id and Protocol.
func ProcessMember(id string) string {
	return id + protocolMark + strconv.Itoa(Protocol)
}

// MemberProtocol is the protocol a member of Processes says: 1 for one
// that says none (a build before protocols were said).
func MemberProtocol(member string) int {
	i := strings.LastIndex(member, protocolMark)
	if i < 0 {
		return 1
	}
	n, err := strconv.Atoi(member[i+len(protocolMark):])
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// CronLock is a STRING lock taken by the process that enqueues the tick at
// unix second tick of cron entry name.
func (s Space) CronLock(name string, tick int64) string {
	return s.prefix() + ":cron:" + tag("cron", name, "") + ":" + fmt.Sprint(tick)
}

// Queue is the asynq queue name of downstream ds. asynq builds its own keys
// as "asynq:{<queue>}:…", so the queue name itself is the hash tag there.
func (s Space) Queue(ds string) string {
	return s.prefix() + ":" + ds
}

// DownstreamOfQueue is the inverse of Queue: it reports the downstream name
// of an asynq queue built by Queue, and false for any other queue.
func (s Space) DownstreamOfQueue(q string) (string, bool) {
	p := s.prefix() + ":"
	if !strings.HasPrefix(q, p) || len(q) == len(p) {
		return "", false
	}
	return q[len(p):], true
}

// AsynqQueue names the keys asynq (v0.26, internal/base/base.go) keeps for
// one queue. shaper reads them to find corrupt entries and, in one script,
// moves such entries to its quarantine; it never writes asynq's format.
type AsynqQueue struct {
	// Name is the asynq queue name (Space.Queue).
	Name string
}

// AsynqCancelChannel is asynq's pub/sub channel for cancelling a task in
// progress (the message is its id): asynq.Inspector.CancelProcessing
// publishes there, whatever the queue, and the take engine listens.
const AsynqCancelChannel = "asynq:cancel"

// Asynq names the asynq keys of downstream ds's queue.
func (s Space) Asynq(ds string) AsynqQueue { return AsynqQueue{Name: s.Queue(ds)} }

func (a AsynqQueue) base() string { return "asynq:{" + a.Name + "}:" }

// TaskPrefix is the prefix of the task HASHes (field "msg": the protobuf
// TaskMessage; "state"; …).
func (a AsynqQueue) TaskPrefix() string { return a.base() + "t:" }

// Task is the HASH of task id.
func (a AsynqQueue) Task(id string) string { return a.TaskPrefix() + id }

// Pending is the LIST of ids waiting to be dequeued.
func (a AsynqQueue) Pending() string { return a.base() + "pending" }

// Active is the LIST of ids a worker holds.
func (a AsynqQueue) Active() string { return a.base() + "active" }

// Scheduled is the ZSET of ids by the time they become pending.
func (a AsynqQueue) Scheduled() string { return a.base() + "scheduled" }

// Retry is the ZSET of ids by the time of their next attempt.
func (a AsynqQueue) Retry() string { return a.base() + "retry" }

// Archived is the ZSET of ids that failed for good, by archive time.
func (a AsynqQueue) Archived() string { return a.base() + "archived" }

// Lease is the ZSET of active ids by lease expiry; asynq's crash recovery
// reads it.
func (a AsynqQueue) Lease() string { return a.base() + "lease" }

// Completed is the ZSET of ids kept after success (retention), by expiry.
func (a AsynqQueue) Completed() string { return a.base() + "completed" }

// Quarantine is the LIST of corrupt entries shaper moved out of downstream
// ds's asynq queue (JSON, newest first). The hash tag is the queue name, as
// in asynq's own keys, so one script moves an entry atomically on a
// cluster.
func (s Space) Quarantine(ds string) string {
	return s.prefix() + ":quarantine:{" + s.Queue(ds) + "}"
}

// FairKeys are the keys of downstream ds's fair-share index: the weighted
// fair order of the tasks that wait in asynq's pending list. Their hash
// tag is the queue name, as in asynq's own keys, so one script takes a
// task from pending to active in fair order atomically on a cluster.
type FairKeys struct {
	// Parked is a ZSET of task IDs scored by virtual start tag.
	Parked string
	// Tags is a HASH of admission key → virtual finish tag of its last
	// parked task.
	Tags string
	// State is a HASH of the queue's virtual time and scan cursors.
	State string
	// Later is a ZSET of task IDs not yet due (a future ProcessAt or a
	// per-key ceiling), scored by due time in ms.
	Later string
	// Counts is a HASH of admission key → tasks parked or later.
	Counts string
	// NotBefore is a HASH of admission key → when its next task may be
	// promoted (ms), for a per-key ceiling.
	NotBefore string
	// Controls is a HASH of the operator's settings per admission key
	// (shaper ctl key): "p:<key>" paused, "w:<key>" weight, "r:<key>"
	// ceiling as "<rate>/<period µs>" (package control writes it).
	Controls string
	// Held is a ZSET of a paused key's tasks, out of fair order until the
	// key resumes (fair.lua).
	Held string
	// Pos is a HASH of task ID → its number in asynq's pending list
	// (prelude_fairpos.lua), so a take finds it without a scan.
	Pos string
	// Rates is a HASH of the keys' own ceilings (key_rates) where the
	// takes read them (keyrates.lua).
	Rates string
}

// Fair returns downstream ds's fair-share keys.
func (s Space) Fair(ds string) FairKeys {
	b := s.prefix() + ":fair:{" + s.Queue(ds) + "}:"
	return FairKeys{Parked: b + "parked", Tags: b + "tags", State: b + "state", Later: b + "later",
		Counts: b + "counts", NotBefore: b + "nb", Controls: b + "keyctl", Held: b + "held", Pos: b + "pos", Rates: b + "keyrates"}
}

// List returns the keys in the order fair.lua takes them (KEYS[1..6]).
func (f FairKeys) List() []string {
	return []string{f.Parked, f.Tags, f.State, f.Later, f.Counts, f.NotBefore}
}

// Fleet is the HASH where every process's status page publishes its
// summary (field: process id, value: JSON with its time), so that any
// process's page shows the whole fleet.
func (s Space) Fleet() string {
	return s.prefix() + ":fleet"
}
