#!/usr/bin/env bash
# A session with the enqueue CLI: one task, a dry run, a task for later, a
# unique task, JSON Lines through admission, and a bad line, each with its
# exit code. Run it from the repository root against a Redis on localhost:
#
#   bash examples/enqueue-session/session.sh
#
# and, in another terminal, shaper with the same config to watch the tasks
# flow (status page at http://127.0.0.1:8080/):
#
#   go run ./cmd/shaper -config examples/enqueue-session/shaper.yaml
#
# Environment: ENQUEUE (the command; default: ./cmd/enqueue, built first),
# CONFIG, REDIS_URL (overrides the config's redis.url), PREFIX.
# Exit codes of enqueue: 0 all enqueued, 1 some rejected by admission,
# 2 bad input, 3 Redis unreachable, 4 other failures (e.g. a duplicate
# unique key). See docs/enqueue.md.
set -u
here=$(cd "$(dirname "$0")" && pwd)
if [ -z "${ENQUEUE:-}" ]; then
  # a built binary, not `go run`: go run reports every non-zero exit as
  # its own "exit status N" and exits 1, hiding the codes shown here
  bin=$(mktemp -d "${TMPDIR:-/tmp}/enqueue-session-bin-XXXXXX")
  trap 'rm -rf "$bin"' EXIT
  (cd "$here/../.." && go build -o "$bin/enqueue" ./cmd/enqueue) || exit 1
  ENQUEUE="$bin/enqueue"
fi
CONFIG=${CONFIG:-$here/shaper.yaml}
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
PREFIX=${PREFIX:-session-example}

enq() {
  echo "\$ enqueue $*"
  $ENQUEUE --config "$CONFIG" --redis "$REDIS_URL" --prefix "$PREFIX" "$@"
  echo "exit $?"
}

echo "== 1. check a task without enqueueing it (no Redis contacted)"
enq --downstream reports --payload '{"report":"daily"}' --key tenant-a --dry-run

echo "== 2. one task for tenant-a"
enq --downstream reports --payload '{"report":"daily"}' --key tenant-a

echo "== 3. one task to run in 10 minutes"
enq --downstream reports --payload '{"report":"weekly"}' --key tenant-a --in 10m

echo "== 4. a unique task, twice: the second is refused while the first exists"
enq --downstream reports --payload '{"report":"monthly"}' --key tenant-u --unique monthly-2026-01
enq --downstream reports --payload '{"report":"monthly"}' --key tenant-u --unique monthly-2026-01

echo "== 5. 20 tasks of tenant-b as JSON Lines: its bucket holds 5, the rest are rejected"
for i in $(seq 1 20); do echo "{\"payload\":{\"row\":$i},\"key\":\"tenant-b\"}"; done > "${TMPDIR:-/tmp}/enqueue-session-$$.jsonl"
enq --downstream reports --json --file "${TMPDIR:-/tmp}/enqueue-session-$$.jsonl"
rm -f "${TMPDIR:-/tmp}/enqueue-session-$$.jsonl"

echo "== 6. a bad line among good ones: named on stderr, the good one goes ahead"
printf '%s\n' '{"payload":{"ok":1},"key":"tenant-c"}' '{"payload":{"ok":2},"cost":-1,"key":"tenant-c"}' > "${TMPDIR:-/tmp}/enqueue-session-$$.jsonl"
enq --downstream reports --file "${TMPDIR:-/tmp}/enqueue-session-$$.jsonl"
rm -f "${TMPDIR:-/tmp}/enqueue-session-$$.jsonl"
