#!/usr/bin/env bash
# Installs the Debian packages the test suite exercises for real, if they are missing.
# Idempotent and quiet when everything is present. Needs root (CI and sessions run as root).
set -euo pipefail

need=()
command -v dot >/dev/null 2>&1 || need+=(graphviz)
command -v cupsd >/dev/null 2>&1 || [ -x /usr/sbin/cupsd ] || need+=(cups)
command -v lp >/dev/null 2>&1 || need+=(cups-client)
# The console's browser tests drive Debian's Chromium through Playwright (never `playwright install`).
command -v chromium >/dev/null 2>&1 || need+=(chromium)

if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != "0" ]; then
    echo "missing system packages: ${need[*]} (run as root or install them)" >&2
    exit 1
  fi
  echo "installing system packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# The print station's tests print through a real CUPS queue with a file device.
bash "$(dirname "$0")/ensure_cups_queue.sh"
