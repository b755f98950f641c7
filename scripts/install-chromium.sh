#!/usr/bin/env bash
# Installs Debian's chromium for the status page's browser test
# (cmd/shaper/statuspage_test.go), which fails when /usr/bin/chromium is
# missing. Does nothing when it is already there. Needs root or sudo and
# Debian's package archive.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
echo "install-chromium.sh: /usr/bin/chromium missing; installing Debian's chromium with apt-get" >&2
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
test -x /usr/bin/chromium
