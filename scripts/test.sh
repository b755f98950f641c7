#!/usr/bin/env bash
# The whole test suite: vet, gofmt, and `go test -race ./...` against a real
# redis-server (installed with apt-get when missing), then the cluster pass
# against a real 3-master Redis Cluster. The Go test harness
# (internal/redistest) starts its own throwaway server on a free loopback
# port, and scripts/cluster.sh starts the cluster on free loopback ports in
# a fresh directory, so nothing here touches a Redis already running on the
# machine.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1; then
  echo "test.sh: redis-server missing; installing it with apt-get" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
  # Debian starts the packaged service; the tests never use it.
fi

# Services and tools other tests need, installed or started when missing:
# PostgreSQL (shaping/pgsink, examples/pg-import), Chromium (the status page
# test), promtool (the alert rules' unit tests).
bash scripts/postgres.sh
bash scripts/install-chromium.sh
bash scripts/install-promtool.sh

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "test.sh: gofmt needed on:" $unformatted >&2
  exit 1
fi
go vet ./...
# Library packages first, two at a time, with the race detector. go test
# starts them in the order given, so the longest go first (shaping, about
# 160 s, then 20-60 s each): last in go list's order, shaping used to
# start some 250 s in, when the rest was done. Their t.Parallel tests
# run GOMAXPROCS (2) at a time: 4 at a time under -race made timing
# checks (a settled cost's spacing, a quota's 429s) fail on a loaded
# 2-core machine. Then the
# packages that run real shaper processes against a recording sink, one
# package at a time (below, beside the cluster pass's library packages,
# which mostly wait), so their timing checks (releases per sliding second)
# are not starved of CPU on a 2-core machine: those tests do not call
# t.Parallel, and go test starts a package's parallel tests only once its
# serial ones are done, so -parallel 4 overlaps only the few that count
# rather than time (ticks, calls open at once, log lines in a window).
# Those run without -race: the code under test runs in child processes
# built without it anyway, and an instrumented sink stalls for tens of
# milliseconds, which would be measured as shaper's jitter.
# GORACE atexit_sleep_ms=0: a race-built binary otherwise sleeps 1 s as
# it exits (the default lets other goroutines still report a race), and
# the 50-odd test binaries here run one after another beside shaping, so
# that second per package was some 50 s of this pass. A race found while
# a test runs still fails that test; only the wait at exit goes.
GORACE="atexit_sleep_ms=0 ${GORACE:-}" go test -race -count=1 -timeout 20m "$@" ./shaping/ ./shaping/take/ ./internal/bench/ ./shaping/pgsink/ ./internal/replay/ ./internal/lua/ ./internal/refmodel/ $(go list ./... | grep -v '/cmd/')
echo "test.sh: library packages done at ${SECONDS}s" >&2

# The fuzz targets' bounded runs are part of the race pass above: each
# TestXMutations runs its FuzzX body on the inputs a `-fuzz -fuzztime Nx`
# run would try (redistest.Mutations: the committed corpus and seeds with
# the engine's kinds of byte mutations, seeded, so a failure reruns the
# same): 300 for FuzzAdmission (internal/lua), 3000 each for FuzzParse in
# internal/config, internal/taskspec and internal/rlheader. No fuzz-
# instrumented build (some 105 s of the suite's 114 s fuzz pass). To fuzz
# with coverage guidance, for as long as you like:
#   go test -run '^$' -fuzz '^FuzzAdmission$' -fuzztime 5m ./internal/lua/
#   go test -run '^$' -fuzz '^FuzzParse$' -fuzztime 5m ./internal/config/
#   (likewise ./internal/taskspec/, ./internal/rlheader/, and
#   FuzzReaderLine in ./internal/replay/)

# Cluster pass. A real 3-master Redis Cluster (scripts/cluster.sh: fresh
# directories, free loopback ports, returns once every node reports
# cluster_state:ok), always torn down on exit. The limiter, shaping,
# producer and key tests run again on it, unchanged: with
# REDIS_CLUSTER_ADDRS set, redistest.Client hands them a cluster client
# (tests on a Redis of their own skip: they would run unchanged a second
# time), and so do the few whose claim is pure timing when other tests
# here run their scripts and keys (redistest.TimingOnly names them).
# Without -race: the first pass ran the same code under the race
# detector; this pass is about key slots, CROSSSLOT and the cluster
# client. Then cmd/shaper's cluster tests (-run Cluster), one at a time and
# without -race as above: fidelity of 3 processes and 4 downstreams on
# different slots, the NOSCRIPT fallback after SCRIPT FLUSH, memory per
# key, and a failover on a private cluster with replicas.
cluster_dir=$(mktemp -d "${TMPDIR:-/tmp}/shaper-cluster-XXXXXX")
trap 'bash scripts/cluster.sh stop "$cluster_dir"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
cluster_env=$(bash scripts/cluster.sh start -d "$cluster_dir") # fails the script if it fails
eval "$cluster_env"
export -n REDIS_CLUSTER_ADDRS # the cmd pass beside it runs on Redis servers of its own
echo "test.sh: Redis Cluster at $REDIS_CLUSTER_ADDRS"
# The cluster pass's library packages run beside the cmd pass: both wait
# on rates far more than they compute (the shaping package's tests use
# about a fifth of one core under -race, less without), so on 2 cores the
# cmd pass's timing checks keep their CPU, and the suite saves the
# cluster pass's two minutes. Its output is printed when it is done.
cluster_log="$cluster_dir/library.log"
REDIS_CLUSTER_ADDRS="$REDIS_CLUSTER_ADDRS" go test -count=1 -timeout 10m "$@" ./shaping/ ./limiters/ ./queue/ ./internal/keys/ > "$cluster_log" 2>&1 &
cluster_pid=$!
cmd_status=0
go test -count=1 -timeout 20m -p 1 -parallel 4 "$@" ./cmd/... || cmd_status=$?
echo "test.sh: cmd packages done at ${SECONDS}s" >&2
cluster_status=0
wait "$cluster_pid" || cluster_status=$?
cat "$cluster_log"
echo "test.sh: cluster library packages done at ${SECONDS}s" >&2
if [ "$cmd_status" -ne 0 ] || [ "$cluster_status" -ne 0 ]; then
  echo "test.sh: cmd pass exit $cmd_status, cluster library pass exit $cluster_status" >&2
  exit 1
fi
export REDIS_CLUSTER_ADDRS
go test -count=1 -timeout 10m -p 1 -run Cluster "$@" ./cmd/shaper/
echo "test.sh: cluster pass done at ${SECONDS}s" >&2
