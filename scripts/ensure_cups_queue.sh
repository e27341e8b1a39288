#!/usr/bin/env bash
# Starts CUPS if it is not running and makes sure the test queue exists: a file device (every job is
# written to $LEDGERFLOW_CUPS_DIR/<queue>.out) behind a passthrough PPD. Idempotent; needs root.
# The station's CUPS tests print through this queue with the real `lp`/`lpstat`.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"

QUEUE="${LEDGERFLOW_CUPS_QUEUE:-ledgerflow-test}"
OUT_DIR="${LEDGERFLOW_CUPS_DIR:-/var/tmp/ledgerflow-cups}"
PPD="$(cd "$(dirname "$0")" && pwd)/cups/ledgerflow-passthrough.ppd"
FILES_CONF=/etc/cups/cups-files.conf

if ! command -v cupsd >/dev/null 2>&1 || ! command -v lpadmin >/dev/null 2>&1; then
  echo "CUPS is not installed (scripts/ensure_system_deps.sh installs it)" >&2
  exit 1
fi

scheduler_running() { lpstat -r 2>/dev/null | grep -q "is running"; }

# file: devices are refused unless FileDevice is on; the scheduler reads it at start.
restart=0
if ! grep -qE '^\s*FileDevice\s+Yes' "$FILES_CONF"; then
  echo "FileDevice Yes" >> "$FILES_CONF"
  restart=1
fi
if [ "$restart" = 1 ] && scheduler_running; then
  kill "$(pgrep -x cupsd)" 2>/dev/null || true
  for _ in $(seq 1 50); do scheduler_running || break; sleep 0.1; done
fi
if ! scheduler_running; then
  mkdir -p /run/cups
  cupsd
  for _ in $(seq 1 100); do scheduler_running && break; sleep 0.1; done
  scheduler_running || { echo "cupsd did not start" >&2; exit 1; }
fi

mkdir -p "$OUT_DIR"
chmod 1777 "$OUT_DIR"
uri="file://$OUT_DIR/$QUEUE.out"
if ! lpstat -v "$QUEUE" 2>/dev/null | grep -q "$OUT_DIR/$QUEUE.out" \
   || ! grep -qs "Ledgerflow Passthrough" "/etc/cups/ppd/$QUEUE.ppd"; then
  lpadmin -p "$QUEUE" -E -v "$uri" -P "$PPD" 2>/dev/null
fi
cupsenable "$QUEUE"
cupsaccept "$QUEUE"
