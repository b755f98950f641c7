#!/usr/bin/env bash
# A throwaway Redis Cluster on loopback, for tests and for trying shaper on a
# cluster by hand.
#
#   scripts/cluster.sh start [-m MASTERS] [-r REPLICAS] [-d DIR]
#       Starts MASTERS (default 3) masters, each with REPLICAS (default 0)
#       replicas, on free loopback ports, every node in a fresh directory
#       under DIR (default: a new mktemp directory). Creates the cluster with
#       `redis-cli --cluster create` and returns only once EVERY node reports
#       cluster_state:ok, knows every node and (with replicas) every replica's
#       link to its master is up. Prints, on stdout, lines to eval:
#           export REDIS_CLUSTER_ADDRS=127.0.0.1:p1,127.0.0.1:p2,...
#           export SHAPER_CLUSTER_DIR=/tmp/shaper-cluster-...
#       On any failure it stops what it started and exits non-zero.
#   scripts/cluster.sh stop DIR
#       Stops every node started under DIR (by the pids in their pid files)
#       and removes DIR.
#   scripts/cluster.sh status DIR
#       Prints each node's address, role and cluster_state.
#
# By hand:
#   eval "$(scripts/cluster.sh start)"
#   go test ./limiters/ ./shaping/            # now runs on the cluster
#   scripts/cluster.sh stop "$SHAPER_CLUSTER_DIR"
#
# Ports are picked at random below the kernel's ephemeral range and checked
# free; the cluster bus port is set explicitly (--cluster-port) and checked
# too. Nothing here touches a Redis it did not start (never 6379).
set -euo pipefail

die() { echo "cluster.sh: $*" >&2; exit 1; }

# port_busy PORT: something is listening on 127.0.0.1:PORT.
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# pick_port: sets PORT to a random loopback port in [20000, 32000) that
# nobody listens on and that this run has not handed out yet. (A global, not
# an echo: a $(subshell) would lose the record of ports taken.)
declare -A taken=()
PORT=""
pick_port() {
  local p i
  for i in $(seq 1 200); do
    p=$((20000 + RANDOM % 12000))
    if [ -z "${taken[$p]:-}" ] && ! port_busy "$p"; then
      taken[$p]=1
      PORT=$p
      return 0
    fi
  done
  return 1
}

cli() { redis-cli -h 127.0.0.1 -p "$1" "${@:2}"; }

# wait_until SECONDS DESCRIPTION COMMAND...: poll COMMAND (every 50ms) until
# it succeeds, or fail once SECONDS have passed.
wait_until() {
  local secs=$1 what=$2
  shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "cluster.sh: timed out after ${secs}s waiting for $what" >&2
      return 1
    fi
    sleep 0.05 # poll interval, bounded by the deadline
  done
}

# start_node DIR: start one cluster-enabled redis-server in a fresh
# subdirectory of DIR; sets NODE_PORT. Retries on a port lost to a race.
NODE_PORT=""
start_node() {
  local root=$1 attempt port bus d
  for attempt in 1 2 3 4 5; do
    pick_port || return 1
    port=$PORT
    pick_port || return 1
    bus=$PORT
    d="$root/node-$port"
    mkdir -p "$d"
    redis-server --port "$port" --bind 127.0.0.1 --cluster-enabled yes --cluster-port "$bus" \
      --cluster-config-file "$d/nodes.conf" --cluster-node-timeout 2000 \
      --repl-diskless-sync-delay 0 --save "" --appendonly no --dir "$d" --logfile "$d/redis.log" \
      --daemonize yes --pidfile "$d/redis.pid" >/dev/null
    if wait_until 10 "redis-server on port $port" cli "$port" ping; then
      NODE_PORT=$port
      return 0
    fi
    # did not come up (most likely the port was taken meanwhile)
    [ -f "$d/redis.pid" ] && kill "$(cat "$d/redis.pid")" 2>/dev/null || true
    echo "cluster.sh: node on port $port did not start (attempt $attempt):" >&2
    tail -n 3 "$d/redis.log" >&2 2>/dev/null || true
    mv "$d" "$d.failed"
  done
  return 1
}

node_ports() { local d; for d in "$1"/node-*/; do [ -f "$d/redis.pid" ] && basename "$d" | sed 's/^node-//'; done; }

stop_cluster() {
  local root=$1 pidf pid pids=()
  [ -d "$root" ] || return 0
  for pidf in "$root"/node-*/redis.pid; do
    [ -f "$pidf" ] || continue
    pid=$(cat "$pidf")
    # only a live redis-server (a stale pid file may name a reused pid)
    if kill -0 "$pid" 2>/dev/null && grep -q redis-server "/proc/$pid/cmdline" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
  done
  local deadline=$((SECONDS + 10))
  for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2>/dev/null; do
      if [ "$SECONDS" -ge "$deadline" ]; then
        kill -9 "$pid" 2>/dev/null || true
        break
      fi
      sleep 0.05 # poll interval, bounded by the deadline
    done
  done
  rm -rf "$root"
}

# cluster_ready PORT TOTAL: this node says ok and knows every node.
cluster_ready() {
  local info
  info=$(cli "$1" cluster info | tr -d '\r') || return 1
  grep -qx 'cluster_state:ok' <<<"$info" &&
    grep -qx "cluster_known_nodes:$2" <<<"$info" &&
    grep -qx 'cluster_slots_ok:16384' <<<"$info"
}

# replica_ready PORT: a replica's link to its master is up (true for masters).
replica_ready() {
  local info
  info=$(cli "$1" info replication | tr -d '\r') || return 1
  grep -qx 'role:master' <<<"$info" || grep -qx 'master_link_status:up' <<<"$info"
}

cmd_start() {
  local masters=3 replicas=0 root=""
  while [ $# -gt 0 ]; do
    case $1 in
      -m) masters=$2; shift 2 ;;
      -r) replicas=$2; shift 2 ;;
      -d) root=$2; shift 2 ;;
      *) die "start: unknown argument $1" ;;
    esac
  done
  command -v redis-server >/dev/null || die "redis-server not on PATH"
  command -v redis-cli >/dev/null || die "redis-cli not on PATH"
  [ "$masters" -ge 3 ] || die "start: Redis Cluster needs at least 3 masters, got $masters"
  if [ -z "$root" ]; then
    root=$(mktemp -d "${TMPDIR:-/tmp}/shaper-cluster-XXXXXX")
  else
    mkdir -p "$root"
    [ -z "$(ls -A "$root")" ] || die "start: $root is not empty (fresh directories only)"
  fi
  # Whatever ends this script before the cluster is up (an error under
  # set -e, a signal) stops what it started.
  started_ok=0
  # shellcheck disable=SC2064
  trap "[ \$started_ok = 1 ] || stop_cluster '$root'" EXIT
  trap 'exit 1' INT TERM
  local total=$((masters * (replicas + 1))) ports=() i p
  for i in $(seq 1 "$total"); do
    start_node "$root" || { stop_cluster "$root"; die "could not start node $i"; }
    ports+=("$NODE_PORT")
  done
  local addrs=()
  for p in "${ports[@]}"; do addrs+=("127.0.0.1:$p"); done
  # redis-cli assigns the first $masters addresses as masters
  if ! redis-cli --cluster create "${addrs[@]}" --cluster-replicas "$replicas" --cluster-yes >"$root/create.log" 2>&1; then
    cat "$root/create.log" >&2
    stop_cluster "$root"
    die "redis-cli --cluster create failed"
  fi
  for p in "${ports[@]}"; do
    if ! wait_until 30 "cluster_state:ok on 127.0.0.1:$p" cluster_ready "$p" "$total" ||
      ! wait_until 30 "replication link on 127.0.0.1:$p" replica_ready "$p"; then
      cli "$p" cluster info >&2 || true
      stop_cluster "$root"
      die "cluster did not converge"
    fi
  done
  started_ok=1
  local seeds=()
  for p in "${ports[@]:0:$masters}"; do seeds+=("127.0.0.1:$p"); done
  echo "export REDIS_CLUSTER_ADDRS=$(IFS=,; echo "${seeds[*]}")"
  echo "export SHAPER_CLUSTER_DIR=$root"
}

cmd_status() {
  local root=$1 p
  for p in $(node_ports "$root"); do
    printf '127.0.0.1:%s %s %s\n' "$p" \
      "$(cli "$p" info replication 2>/dev/null | tr -d '\r' | grep '^role:' || echo role:down)" \
      "$(cli "$p" cluster info 2>/dev/null | tr -d '\r' | grep '^cluster_state:' || echo cluster_state:down)"
  done
}

case ${1:-} in
  start) shift; cmd_start "$@" ;;
  stop) [ $# -eq 2 ] || die "usage: $0 stop DIR"; stop_cluster "$2" ;;
  status) [ $# -eq 2 ] || die "usage: $0 status DIR"; cmd_status "$2" ;;
  *) die "usage: $0 start [-m MASTERS] [-r REPLICAS] [-d DIR] | stop DIR | status DIR" ;;
esac
