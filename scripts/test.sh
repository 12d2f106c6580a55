#!/usr/bin/env bash
# Run idem's whole test suite. The tests start their own redis-server processes on free
# loopback ports (never a shared instance), so the binary must be installed.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1; then
  echo "redis-server not found: installing Debian's redis-server (the tests start their own instances)"
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
fi

cargo test --all-targets --locked "$@"
