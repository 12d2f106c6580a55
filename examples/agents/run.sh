#!/usr/bin/env bash
# One agent runtime's crash-and-resume, end to end, on loopback:
#
#   examples/agents/run.sh dbos|langgraph|openai_agents|vercel_ai|mcp
#
# Starts the charge API (examples/payments_api.py on 3002; for mcp, mcp/server.py on
# 3003), idem with RUNTIME/idem.yaml (8082), then runs the agent with
# IDEM_CRASH_AFTER_CHARGE=1 (it SIGKILLs itself right after the charge answered, before
# the runtime recorded the step), runs it again (the runtime resumes), and prints how many
# charges the API executed. The runtimes are installed, pinned (requirements.txt with
# constraints.txt, package.json with package-lock.json), into target/agent-peers/ as
# tests/mcp/agents.rs does. idem: $IDEM_BIN, else
# target/release/idem, else `cargo build --release`.
set -euo pipefail
RUNTIME=${1:?usage: run.sh dbos|langgraph|openai_agents|vercel_ai|mcp}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PEERS=${AGENT_PEERS:-$ROOT/target/agent-peers}
[[ -f "$HERE/$RUNTIME/idem.yaml" ]] || { echo "no such example: $RUNTIME" >&2; exit 64; }

command -v python3 >/dev/null || { echo "python3 missing (Debian: apt-get install python3 python3-venv)" >&2; exit 1; }
mkdir -p "$PEERS"
if [[ ! -x "$PEERS/venv/bin/python" ]]; then python3 -m venv "$PEERS/venv"; fi
"$PEERS/venv/bin/python" -m pip install -q --disable-pip-version-check -r "$HERE/requirements.txt" -c "$HERE/constraints.txt"
if [[ $RUNTIME == vercel_ai ]]; then
    command -v npm >/dev/null || { echo "node/npm missing (Debian: apt-get install nodejs npm)" >&2; exit 1; }
    cp "$HERE/package.json" "$HERE/package-lock.json" "$PEERS/"
    (cd "$PEERS" && npm install --silent --no-audit --no-fund)
    cp "$HERE/vercel_ai/agent.mjs" "$PEERS/vercel-ai-agent.mjs"  # ES modules resolve next to the script
fi
IDEM=${IDEM_BIN:-$ROOT/target/release/idem}
if [[ ! -x $IDEM ]]; then (cd "$ROOT" && cargo build --release --quiet); IDEM=$ROOT/target/release/idem; fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/idem-agents.XXXXXX")
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
port_free() { if (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then echo "port $1 is in use: stop what listens there" >&2; exit 1; fi; }
for port in 3002 3003 8082 9903; do port_free $port; done
wait_port() { for _ in $(seq 100); do (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done; echo "nothing on port $1" >&2; exit 1; }

PY=$PEERS/venv/bin/python
if [[ $RUNTIME == mcp ]]; then
    "$PY" "$HERE/mcp/server.py" 3003 "$WORK/charges.log" >"$WORK/server.log" 2>&1 & PIDS+=($!); wait_port 3003
else
    python3 "$ROOT/examples/payments_api.py" 3002 2>"$WORK/charges.log" & PIDS+=($!); wait_port 3002
fi
"$IDEM" serve --config "$HERE/$RUNTIME/idem.yaml" 2>"$WORK/idem.log" & PIDS+=($!); wait_port 8082
cd "$WORK"

RUN_ID=order-$(date +%s)
CHARGES='[{"customer": "cus_42", "amount": 500}]'
case $RUNTIME in
    dbos) agent() { "$PY" "$HERE/dbos/agent.py" "$RUN_ID" cus_42 500; } ;;
    langgraph) agent() { "$PY" "$HERE/langgraph/agent.py" "$RUN_ID" "$CHARGES"; } ;;
    openai_agents) agent() { "$PY" "$HERE/openai_agents/agent.py" "$RUN_ID" '[{"customer": "cus_42", "amount": 500, "invoice": "inv_7"}]'; } ;;
    vercel_ai) agent() { node "$PEERS/vercel-ai-agent.mjs" "$RUN_ID" "$CHARGES"; } ;;
    mcp) agent() { "$PY" "$HERE/mcp/client.py" "$RUN_ID" cus_42 500; } ;;
esac

echo "--- run 1: the worker dies right after the charge, before the step is recorded"
if [[ $RUNTIME == mcp ]]; then
    "$PY" "$HERE/mcp/client.py" "$RUN_ID" cus_42 500 & CLIENT=$!
    for _ in $(seq 300); do [[ -s $WORK/charges.log ]] && break; sleep 0.05; done
    kill -KILL "$CLIENT"; wait "$CLIENT" 2>/dev/null || true
    echo "(client killed mid-call)"
else
    IDEM_CRASH_AFTER_CHARGE=1 agent || echo "(exit status $?: SIGKILLed)"
fi
echo "--- run 2: the runtime resumes"
agent
echo "--- charges executed by the API: $(grep -c . "$WORK/charges.log")"
