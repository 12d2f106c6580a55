#!/usr/bin/env python3
"""Nemesis run (issue 31 §3): three idem replicas (the real binary) on one store, an
upstream that does not deduplicate and counts its executions, a stream of intents with
concurrent and late duplicates, and a seeded schedule of faults — replicas killed and
frozen, their wall clocks stepped (libfaketime), upstream stalls and resets, store
restarts and freezes, a Sentinel failover or a PostgreSQL standby promotion. Then the
whole history is checked (see check.py). Exit status 1 on any violation.

Usually started through scripts/nemesis.sh, which finds or builds the binary.
Standard library only; needs redis-server (and PostgreSQL's server binaries for
`--store postgres`) and libfaketime.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check      # noqa: E402
import schedule   # noqa: E402
from cluster import FAKETIME, Procs, Redis, Replica   # noqa: E402
from stores import PgPair, SentinelSet               # noqa: E402
from upstream import Upstream                        # noqa: E402
from workload import Workload                        # noqa: E402

LEASE = 5.0
UPSTREAM_TIMEOUT = 6.0


def routes_yaml():
    return f"""routes:
  - name: hold
    methods: [POST]
    path: /hold/{{id}}
    key: "hold:{{path.id}}"
    lease: {LEASE:g}s
    on_concurrent: conflict
    on_unknown: hold
  - name: retry
    methods: [POST]
    path: /retry/{{id}}
    key: "{{header.x-intent}}"
    lease: {LEASE:g}s
    on_concurrent: wait
    wait_timeout: 6s
    on_unknown: retry
    upstream_key_window: 5m
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=1.0, help="traffic and faults (default 1)")
    ap.add_argument("--store", choices=["redis", "sentinel", "postgres"], default="redis")
    ap.add_argument("--seed", type=int, default=None, help="fault schedule seed (default: random)")
    ap.add_argument("--idem", required=True, help="path to the idem binary")
    ap.add_argument("--rate", type=float, default=3.0, help="new intents per second (default 3)")
    ap.add_argument("--workdir", default=None, help="keep logs and configs here")
    ap.add_argument("--faults", default=",".join(schedule.ALL),
                    help="fault kinds to inject, comma-separated (default: all of "
                         f"{','.join(schedule.ALL)}); the others are dropped from the "
                         "seed's schedule, the rest keeps its times")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(3), "big")
    duration = args.minutes * 60
    if not os.path.exists(FAKETIME):
        sys.exit(f"libfaketime not found at {FAKETIME} (Debian: apt-get install libfaketime)")
    if shutil.which("redis-server") is None and args.store != "postgres":
        sys.exit("redis-server not found (scripts/test.sh installs it)")
    workdir = args.workdir or tempfile.mkdtemp(prefix="idem-nemesis-")
    os.makedirs(workdir, exist_ok=True)
    kinds = set(args.faults.split(",")) if args.faults else set()
    if kinds - set(schedule.ALL):
        sys.exit(f"unknown fault kinds: {sorted(kinds - set(schedule.ALL))}")
    faults = [f for f in schedule.make(seed, duration, 3, args.store, LEASE) if f.kind in kinds]
    print(f"nemesis: seed {seed}, store {args.store}, {args.minutes:g} min, idem {args.idem}")
    if kinds != set(schedule.ALL):
        print(f"nemesis: only {','.join(k for k in schedule.ALL if k in kinds)}")
    print(f"nemesis: logs in {workdir}")
    print("fault schedule:")
    for f in faults:
        print("  " + f.describe())
    sys.stdout.flush()

    t0 = time.monotonic()
    clock = lambda: time.monotonic() - t0   # noqa: E731  the run clock, seconds
    procs = Procs(workdir)
    upstream = Upstream(seed, clock, stall_for=UPSTREAM_TIMEOUT + 2.0)
    try:
        store = {"redis": lambda: Redis(procs, workdir),
                 "sentinel": lambda: SentinelSet(procs, workdir),
                 "postgres": lambda: PgPair(procs, workdir)}[args.store]()
        config = (f"upstream:\n  url: {upstream.url()}\n  timeout: {UPSTREAM_TIMEOUT:g}s\n"
                  f"  connect_timeout: 500ms\n{store.store_yaml()}{routes_yaml()}")
        replicas = [Replica(f"r{i}", procs, args.idem, workdir, config) for i in range(3)]
        for r in replicas:
            r.wait_ready()
        t0 = time.monotonic()
        player = schedule.Player(faults, replicas, store, upstream, clock)
        workload = Workload(seed, replicas, clock, duration, args.rate)
        player.start()
        workload.run()
        player.join()
        player.heal()
        print(f"nemesis: traffic done at {clock():.1f}s; waiting for the callers", flush=True)
        workload.wait()
        for r in replicas:
            r.wait_ready(60)
        time.sleep(LEASE + 1.5)   # every lease left behind has run out
        print(f"nemesis: settling {len(workload.intents)} intents at {clock():.1f}s", flush=True)
        check.settle(workload.intents, replicas, clock, LEASE)
        listed, truncated = check.unknown_listing(replicas)
        violations, documented = check.judge(workload.intents, upstream, faults, listed,
                                             LEASE, UPSTREAM_TIMEOUT)
        check.dump(os.path.join(workdir, "history.json"), workload.intents, upstream, faults)
        if truncated:
            violations.append(("unknown-listing", "-", "GET /v1/unknown was truncated"))
        replay = f"bash scripts/nemesis.sh --minutes {args.minutes:g} --store {args.store} " \
            f"--seed {seed}" + (f" --faults {args.faults}" if kinds != set(schedule.ALL) else "")
        check.summary(replay, seed, args.store, args.minutes, workload.intents, workload, faults,
                      upstream, violations, documented, listed, player.errors)
        return 1 if violations else 0
    finally:
        procs.stop_all()
        upstream.stop()
        if args.workdir is None and "violations" in locals() and not violations:
            shutil.rmtree(workdir, ignore_errors=True)   # a passing run's logs are not kept


if __name__ == "__main__":
    sys.exit(main())
