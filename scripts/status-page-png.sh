#!/usr/bin/env bash
# Regenerates docs/status-page.png from a real run: a throwaway
# redis-server on a free loopback port, two shaper processes sharing one
# config (-listen gives each its own port), backlogs enqueued with the
# enqueue CLI, and headless Chromium's screenshot of the first process's
# page once it shows what the picture is for:
#
#   api      drains a backlog at its rate             why waiting: rate
#   partner  has spent its daily quota                why waiting: quota
#   tenants  shares its rate among three tenants      why waiting: fair turns
#   batch    paused with a backlog                    why waiting: paused
#
# and both processes in its list of processes.
#
# Needs go, redis-server, curl, jq and /usr/bin/chromium
# (scripts/install-chromium.sh). Run from anywhere:
#
#   scripts/status-page-png.sh [OUT.png]     (default docs/status-page.png)
#
# Takes about 30 s. Everything it starts is stopped on exit; its files are
# in a temporary directory, removed on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/docs/status-page.png}
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
WIDTH=${WIDTH:-1400}
HEIGHT=${HEIGHT:-1150}

for tool in go redis-server curl jq "$CHROMIUM"; do
  command -v "$tool" >/dev/null 2>&1 || { echo "status-page-png.sh: $tool is missing" >&2; exit 1; }
done

TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT

# free_port prints a loopback port nothing listens on.
free_port() {
  local port
  for _ in $(seq 1 100); do
    port=$((20000 + RANDOM % 20000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return
    fi
  done
  echo "status-page-png.sh: no free port found" >&2
  exit 1
}

# wait_for SECONDS WHAT COMMAND...: runs COMMAND every 0.2 s until it
# succeeds; fails naming WHAT after SECONDS.
wait_for() {
  local secs=$1 what=$2
  shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "status-page-png.sh: timed out after ${secs}s waiting for $what" >&2
      exit 1
    fi
    sleep 0.2
  done
}

echo "building shaper and enqueue" >&2
(cd "$ROOT" && go build -o "$TMP/shaper" ./cmd/shaper && go build -o "$TMP/enqueue" ./cmd/enqueue)

REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$TMP" >"$TMP/redis.log" 2>&1 &
PIDS+=($!)
wait_for 10 "redis-server on port $REDIS_PORT" redis-cli -p "$REDIS_PORT" ping

cat >"$TMP/shaper.yaml" <<EOF
redis: {url: "redis://127.0.0.1:$REDIS_PORT", prefix: "statuspng"}
http: {listen: "127.0.0.1:0"}
shutdown_timeout: 2s
downstreams:
  - {name: api, rate: 20/s, handler: {type: log}}
  - name: partner
    rate: 50/s
    quotas: [{limit: 300, per: 24h, align: "00:00 UTC"}]
    handler: {type: log}
  - {name: tenants, rate: 6/s, fairness: {key: tenant}, handler: {type: log}}
  - {name: batch, rate: 10/s, handler: {type: log}}
EOF

P1=$(free_port)
"$TMP/shaper" -config "$TMP/shaper.yaml" -listen "127.0.0.1:$P1" >"$TMP/shaper1.log" 2>&1 &
PIDS+=($!)
wait_for 20 "the first shaper on port $P1" curl -fsS "http://127.0.0.1:$P1/readyz"
P2=$(free_port)
"$TMP/shaper" -config "$TMP/shaper.yaml" -listen "127.0.0.1:$P2" >"$TMP/shaper2.log" 2>&1 &
PIDS+=($!)
wait_for 20 "the second shaper on port $P2" curl -fsS "http://127.0.0.1:$P2/readyz"

echo "enqueueing the backlogs" >&2
tasks() { # tasks DOWNSTREAM N [KEY]: N JSON Lines tasks
  for i in $(seq 1 "$2"); do
    printf '{"downstream":"%s","payload":{"n":%d},"key":"%s"}\n' "$1" "$i" "${3:-}"
  done
}
{
  tasks api 1500
  tasks partner 500
  tasks batch 400
  tasks tenants 200 tenant-acme
  tasks tenants 120 tenant-globex
  tasks tenants 60 tenant-initech
} | "$TMP/enqueue" --config "$TMP/shaper.yaml" --concurrency 8 >/dev/null

STATUS="http://127.0.0.1:$P1/status.json"
# batch releases for a few seconds, then is paused
wait_for 20 "batch's first releases" sh -c "curl -fsS '$STATUS' | jq -e '.downstreams[] | select(.name==\"batch\") | .releases_total >= 10'"
curl -fsS -X POST "http://127.0.0.1:$P1/v1/downstreams/batch/pause" >/dev/null

ready='
  ([.downstreams[] | {(.name): .why.reason}] | add) as $why
  | $why.api == "rate" and $why.partner == "quota" and $why.tenants == "fair_turns" and $why.batch == "paused"
    and (.view.processes | length) == 2 and .window_seconds >= 15'
wait_for 60 "the page showing every reason and both processes" sh -c "curl -fsS '$STATUS' | jq -e '$ready'"

echo "taking the screenshot" >&2
mkdir -p "$(dirname "$OUT")"
"$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --hide-scrollbars --user-data-dir="$TMP/chromium" \
  --window-size="$WIDTH,$HEIGHT" --virtual-time-budget=3000 --screenshot="$OUT" "http://127.0.0.1:$P1/" \
  >"$TMP/chromium.log" 2>&1 || { cat "$TMP/chromium.log" >&2; exit 1; }
echo "wrote $OUT" >&2
