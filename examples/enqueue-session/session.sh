#!/usr/bin/env bash
# A session with the enqueue CLI: one task, a dry run, a task for later, a
# unique task, JSON Lines through admission, and a bad line, each with its
# exit code. Run it from anywhere, against the Redis at REDIS_URL:
#
#   REDIS_URL=redis://127.0.0.1:6379/0 bash examples/enqueue-session/session.sh
#   bash examples/enqueue-session/session.sh --dry-run   # print the commands, run none
#
# It builds enqueue and shaper into $WORK (default ${TMPDIR:-/tmp}/enqueue-session),
# writes $WORK/shaper.yaml (this directory's shaper.yaml with redis.url set
# to REDIS_URL, redis.prefix to PREFIX), and prints the shaper command that runs that same config,
# to watch the tasks flow (status page at http://127.0.0.1:8080/).
#
# Environment: REDIS_URL (the one Redis of the CLI and of the printed shaper
# command; default redis://127.0.0.1:6379/0), PREFIX (default
# session-example), WORK, and ENQUEUE / SHAPER (binaries to use instead of
# building them).
# Exit codes of enqueue: 0 all enqueued, 1 some rejected by admission,
# 2 bad input, 3 Redis unreachable, 4 other failures (e.g. a duplicate
# unique key). See docs/enqueue.md.
set -u
here=$(cd "$(dirname "$0")" && pwd)
dry=false
case "${1:-}" in
  --dry-run) dry=true ;;
  "") ;;
  *) echo "usage: session.sh [--dry-run]" >&2; exit 2 ;;
esac
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
PREFIX=${PREFIX:-session-example}
WORK=${WORK:-${TMPDIR:-/tmp}/enqueue-session}
mkdir -p "$WORK" || exit 1

# Built binaries, not `go run`: go run reports every non-zero exit as its
# own "exit status N" and exits 1, hiding the codes this session shows.
for tool in enqueue shaper; do
  var=$(echo "$tool" | tr a-z A-Z)
  if [ -z "${!var:-}" ]; then
    if $dry; then
      echo "\$ go build -o $WORK/$tool ./cmd/$tool"
    else
      (cd "$here/../.." && go build -o "$WORK/$tool" "./cmd/$tool") || exit 1
    fi
    printf -v "$var" '%s' "$WORK/$tool"
  fi
done

# One config for both: its redis.url is REDIS_URL, its prefix PREFIX.
CONFIG=$WORK/shaper.yaml
sed -e "s#^  url: .*#  url: $REDIS_URL#" -e "s#^  prefix: .*#  prefix: $PREFIX#" "$here/shaper.yaml" > "$CONFIG" || exit 1
echo "# config: $CONFIG (redis.url $REDIS_URL, prefix $PREFIX); to watch the tasks flow, in another terminal:"
echo "#   $SHAPER -config $CONFIG"

enq() {
  printf '$'; printf ' %q' "$ENQUEUE" --config "$CONFIG" "$@"; echo
  $dry && return
  "$ENQUEUE" --config "$CONFIG" "$@"
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
for i in $(seq 1 20); do echo "{\"payload\":{\"row\":$i},\"key\":\"tenant-b\"}"; done > "$WORK/tenant-b.jsonl"
enq --downstream reports --json --file "$WORK/tenant-b.jsonl"

echo "== 6. a bad line among good ones: named on stderr, the good one goes ahead"
printf '%s\n' '{"payload":{"ok":1},"key":"tenant-c"}' '{"payload":{"ok":2},"cost":-1,"key":"tenant-c"}' > "$WORK/bad-line.jsonl"
enq --downstream reports --file "$WORK/bad-line.jsonl"
