#!/usr/bin/env bash
# Run idem's whole test suite. The tests start their own redis-server and PostgreSQL
# processes on free loopback ports (never a shared instance), so the binaries must be
# installed.
set -euo pipefail
cd "$(dirname "$0")/.."

# redis-cli (redis-tools) creates the test Clusters; Debian's redis-server pulls it in.
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  echo "redis-server/redis-cli not found: installing Debian's redis-server and redis-tools (the tests start their own instances)"
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server redis-tools >/dev/null
fi

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || ! command -v psql >/dev/null 2>&1; then
  echo "PostgreSQL not found: installing Debian's postgresql (the tests start their own instances)"
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  # The server binaries only: no cluster of its own listening on 5432.
  $SUDO mkdir -p /etc/postgresql-common
  echo "create_main_cluster = false" | $SUDO tee /etc/postgresql-common/createcluster.conf >/dev/null
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql postgresql-client >/dev/null
fi

# The MCP tests (tests/mcp/mcp.rs) run the official MCP SDKs as real peers, and the agent
# runtime tests (tests/mcp/agents.rs) DBOS, LangGraph, the OpenAI Agents SDK and the Vercel
# AI SDK; the test support installs them into target/mcp-peers/ and target/agent-peers/
# (pip and npm), given Python with venv and Node.js with npm.
need_apt=()
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3 python3-venv python3-pip)
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || need_apt+=(nodejs npm)
# The console tests (tests/admin/console.rs) drive Debian's Chromium with Playwright for Python,
# which the test support installs into target/browser-peers/ (pip); never Playwright's
# own browser download.
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
# tests/readme/readme_examples.rs runs the README's curl examples; tests/proxy/log_colour.rs gives idem
# a pseudo-terminal with util-linux's `script`.
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
command -v script >/dev/null 2>&1 || need_apt+=(bsdutils)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "installing ${need_apt[*]} (the MCP tests run the official Python and TypeScript SDKs; the console tests a real Chromium; the README tests curl)"
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# tests/admin/observability.rs checks the Helm chart's alert rules with promtool (Debian's
# prometheus package; only the promtool binary is used, no Prometheus server is started).
if ! command -v promtool >/dev/null 2>&1; then
  echo "promtool not found: installing Debian's prometheus package (tests/admin/observability.rs runs promtool)"
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi

# tests/once/clock_skew.rs and the nemesis run (tests/once/nemesis.rs) shift idem's wall clock with
# Debian's libfaketime.
if ! ls /usr/lib/*/faketime/libfaketimeMT.so.1 >/dev/null 2>&1; then
  echo "libfaketime not found: installing Debian's faketime (the clock tests shift idem's wall clock)"
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq faketime >/dev/null
fi

cargo test --workspace --all-targets --locked "$@"
