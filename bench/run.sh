#!/usr/bin/env bash
# One command for the whole benchmark (docs/benchmarks.md):
#   bash bench/run.sh [run.py options, e.g. --rounds 1 --duration 5 --soak 0]
# Installs what it needs from Debian (wrk, nginx-light, redis-server, postgresql), builds
# idem, the bench upstream and the open-loop generator (bench/rate) in release mode, then
# runs bench/run.py, which starts everything on loopback and free ports, stops by itself,
# and writes bench/results/<date>.md.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v nginx >/dev/null 2>&1 || need+=(nginx-light)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v python3 >/dev/null 2>&1 || need+=(python3)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v psql >/dev/null 2>&1 || need+=(postgresql-client)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing from Debian: ${need[*]}"
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  # PostgreSQL's server binaries only: no cluster of its own on 5432.
  $SUDO mkdir -p /etc/postgresql-common
  echo "create_main_cluster = false" | $SUDO tee /etc/postgresql-common/createcluster.conf >/dev/null
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

cargo build --release --locked --bin idem --bin idem-bench-upstream
# The open-loop generator of the added-latency phase (bench/latency.py, bench/rate).
cargo build --release --locked -p idem-bench-rate

# Bounded as a whole: the defaults take about 8 minutes (2 of them the added-latency
# phase, bench/latency.py; --latency 0 skips it).
exec timeout --signal=TERM --kill-after=30 40m \
  python3 bench/run.py --command "bash bench/run.sh${*:+ $*}" "$@"
