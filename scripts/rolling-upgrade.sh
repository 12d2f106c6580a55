#!/usr/bin/env bash
# A rolling upgrade, tried: the given earlier release and the current tree side by side
# on one Redis and one PostgreSQL, under a duplicate storm whose intents are spread over
# both versions. Reports double executions (must be 0), 5xx answers (must be 0) and
# unreadable records. Not part of the default test run: it builds idem twice (release).
#
#   bash scripts/rolling-upgrade.sh <git-ref>        # e.g. the last release tag
#
# Run it before releasing anything that changes the stored record format, against the
# release users run today. Needs redis-server, PostgreSQL's server binaries and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
ref="${1:?usage: scripts/rolling-upgrade.sh <git-ref>}"
work="$(mktemp -d /tmp/idem-rolling.XXXXXX)"
trap 'git worktree remove --force "$work/old" >/dev/null 2>&1 || true' EXIT

echo "== building $ref into $work/old"
git worktree add --detach "$work/old" "$ref" >/dev/null
# ROLLING_TARGET_DIR reuses an earlier build's target folder (its dependencies).
old_target="${ROLLING_TARGET_DIR:-$work/old-target}"
(cd "$work/old" && cargo build --release --locked --bin idem --bin idem-bench-upstream \
  --target-dir "$old_target" 2>&1 | tail -1)
echo "== building the current tree"
cargo build --release --locked --bin idem --bin idem-bench-upstream 2>&1 | tail -1

python3 scripts/rolling_upgrade.py \
  --old "$old_target/release/idem" \
  --new "target/release/idem" \
  --upstream "target/release/idem-bench-upstream" \
  --old-ref "$ref" --workdir "$work"
