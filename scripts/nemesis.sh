#!/usr/bin/env bash
# Nemesis run (issue 31 §3, issue 45 §3): the real idem binary, three replicas on one
# private store, an upstream that counts executions per Idempotency-Key itself (and
# deduplicates only the `retry` route's key, within a window), a stream of intents with
# concurrent and late duplicates over the replicas on a `hold`, a `retry` and a
# `reconcile` route, an operator resolving unknown outcomes through the admin API, and a
# seeded fault schedule:
#   replicas SIGKILLed (and restarted) and SIGSTOPped (and continued); replica wall
#   clocks stepped by ±30/±60/+120 s (libfaketime, one clock file per replica);
#   upstream stalls and resets; store restarts, freezes and clock steps; one replica's
#   link to the upstream or the store delayed or dropped (a TCP proxy per link); a
#   Sentinel failover (--store sentinel) or a PostgreSQL synchronous standby promoted
#   (--store postgres). Every fault is checked to have taken effect; one that did not
#   fails the run.
# Then it checks the whole history: effects per intent ≤ 1 (`retry`: exactly; `hold`,
# `reconcile`: apart from re-executions a store clock step or a lookup blind to a lost
# call explains, counted apart), every 2xx of an intent names the same execution, every
# intent left unsettled is listed by GET /v1/unknown. Prints a summary and the seed;
# the same seed replays the same fault schedule. Exit status 1 on any violation.
#
#   bash scripts/nemesis.sh [--minutes N] [--store redis|sentinel|postgres] [--seed S]
#                           [--idem PATH_TO_BINARY] [--rate R] [--workdir DIR]
#
# Without --idem: target/release/idem, else target/debug/idem, else a release build.
# Needs python3, redis-server, libfaketime, cc (and PostgreSQL's server binaries for
# --store postgres); loopback only; every server is private (free ports, temp dir).
# Details: docs/reliability.md, "Nemesis run"; the driver is scripts/nemesis/*.py.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ " $* " == *" --help "* || " $* " == *" -h "* ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  echo
  exec python3 scripts/nemesis/main.py --help
fi

args=("$@")
has_idem=0
for a in "$@"; do [[ "$a" == --idem || "$a" == --idem=* ]] && has_idem=1; done
if [[ $has_idem == 0 ]]; then
  target="${CARGO_TARGET_DIR:-target}"
  if [[ -x "$target/release/idem" ]]; then
    idem="$target/release/idem"
  elif [[ -x "$target/debug/idem" ]]; then
    idem="$target/debug/idem"
  else
    echo "nemesis: building idem (release)" >&2
    CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-1}" cargo build --release --bin idem >&2
    idem="$target/release/idem"
  fi
  args+=(--idem "$idem")
fi
exec python3 scripts/nemesis/main.py "${args[@]}"
