#!/usr/bin/env bash
# The whole test suite: vet, gofmt, and `go test -race ./...` against a real
# redis-server (installed with apt-get when missing). The Go test harness
# (internal/redistest) starts its own throwaway server on a free loopback
# port, so nothing here touches a Redis already running on the machine.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1; then
  echo "test.sh: redis-server missing; installing it with apt-get" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
  # Debian starts the packaged service; the tests never use it.
fi

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "test.sh: gofmt needed on:" $unformatted >&2
  exit 1
fi
go vet ./...
# Library packages first, in parallel, with the race detector. Then the
# packages that run real shaper processes against a recording sink, one
# package at a time, so their timing checks (releases per sliding second)
# get the CPU to themselves on a 2-core machine. Those run without -race:
# the code under test runs in child processes built without it anyway, and
# an instrumented sink stalls for tens of milliseconds, which would be
# measured as shaper's jitter.
go test -race -count=1 -timeout 20m "$@" $(go list ./... | grep -v '/cmd/')
go test -count=1 -timeout 20m -p 1 "$@" ./cmd/...
