#!/usr/bin/env bash
# Installs promtool (from Debian's prometheus package) for the docs checks
# (internal/docscheck: promtool check rules / test rules on docs/alerts.yml),
# which fail when promtool is missing. Only the promtool binary is taken from
# the package, to /usr/local/bin: no Prometheus server is installed or
# started. Does nothing when promtool is already on PATH.
set -euo pipefail
if command -v promtool >/dev/null 2>&1; then
  exit 0
fi
echo "install-promtool.sh: promtool missing; taking it from Debian's prometheus package" >&2
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp" # apt-get download runs as _apt
$SUDO apt-get update -qq
(cd "$tmp" && apt-get download prometheus >/dev/null)
dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
$SUDO install -m 0755 "$tmp/x/usr/bin/promtool" /usr/local/bin/promtool
promtool --version >/dev/null
