#!/usr/bin/env python3
"""Nemesis run (issue 31 §3, issue 45 §3): three idem replicas (the real binary) on one
store, an upstream that counts its executions (deduplicating only the `retry` route's
key, within a window), a stream of intents with concurrent and late duplicates on a
`hold`, a `retry` and a `reconcile` route, an operator resolving unknown outcomes as
they come, and a seeded schedule of faults — replicas killed and frozen, their wall
clocks stepped (libfaketime), upstream stalls and resets, store restarts, freezes and
clock steps, each replica's links to the upstream and the store delayed or dropped (a
TCP proxy per link), a Sentinel failover or a PostgreSQL standby promotion. Every fault
is checked to have taken effect. Then the whole history is checked (see check.py).
Exit status 1 on any violation, a fault that did not take effect included.

Usually started through scripts/nemesis.sh, which finds or builds the binary.
Standard library only; needs redis-server (and PostgreSQL's server binaries for
`--store postgres`), libfaketime and cc.
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
from links import Links                              # noqa: E402
from oncall import Operator                          # noqa: E402
from stores import PgPair, SentinelSet               # noqa: E402
from upstream import Upstream                        # noqa: E402
from workload import Workload                        # noqa: E402

LEASE = 5.0
UPSTREAM_TIMEOUT = 6.0
# The retry route's `upstream_key_window`, and the upstream's own (longer by every
# store clock step: idem measures the window on the store's clock, SPEC §1).
ROUTE_WINDOW = 60
DEDUP_WINDOW = ROUTE_WINDOW + max(schedule.STORE_STEPS) - min(schedule.STORE_STEPS) + 10
HTTP_PROBE = (b"GET /probe HTTP/1.1\r\nhost: upstream\r\nconnection: close\r\n\r\n", b"HTTP/1.")


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
    upstream_key_window: {ROUTE_WINDOW}s
  - name: reconcile
    methods: [POST]
    path: /reconcile/{{id}}
    key: "reconcile:{{path.id}}"
    lease: {LEASE:g}s
    on_concurrent: conflict
    on_unknown: reconcile
    reconcile:
      method: GET
      path: "/search?key={{key}}"
      found: [200]
      found_json: /data/0
      absent: [200, 404]
      timeout: 2s
"""


def wire(replicas, links, upstream, store):
    """Each replica's config: its upstream and its store servers behind links of its own."""
    ports, probe = store.link_ports()
    configs = []
    for i in range(replicas):
        name = f"r{i}"
        up = links.link(f"{name}/upstream", upstream.port, HTTP_PROBE)
        links.add(f"{name}/upstream", [up], lambda up=up: up)
        by_port = {p: links.link(f"{name}/store:{p}", p, probe) for p in ports}
        if by_port:
            links.add(f"{name}/store", list(by_port.values()),
                      lambda by_port=by_port: by_port[store.link_probe_port()])
        via = lambda port, by_port=by_port: by_port[port].port if port in by_port else port  # noqa: E731
        configs.append(f"upstream:\n  url: http://127.0.0.1:{up.port}\n"
                       f"  timeout: {UPSTREAM_TIMEOUT:g}s\n  connect_timeout: 500ms\n"
                       f"{store.store_yaml(via)}{routes_yaml()}")
    return configs


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
    if shutil.which("cc") is None:
        sys.exit("cc not found: the store's clock (scripts/nemesis/storeclock.c) is built with it")
    if shutil.which("redis-server") is None and args.store != "postgres":
        sys.exit("redis-server not found (scripts/test.sh installs it)")
    workdir = args.workdir or tempfile.mkdtemp(prefix="idem-nemesis-")
    os.makedirs(workdir, exist_ok=True)
    kinds = set(args.faults.split(",")) if args.faults else set()
    if kinds - set(schedule.ALL):
        sys.exit(f"unknown fault kinds: {sorted(kinds - set(schedule.ALL))}")
    faults = [f for f in schedule.make(seed, duration, 3, args.store, LEASE,
                                       store_links=args.store != "sentinel") if f.kind in kinds]
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
    upstream = Upstream(seed, clock, stall_for=UPSTREAM_TIMEOUT + 2.0, dedup_window=DEDUP_WINDOW)
    links = Links()
    try:
        store = {"redis": lambda: Redis(procs, workdir),
                 "sentinel": lambda: SentinelSet(procs, workdir),
                 "postgres": lambda: PgPair(procs, workdir)}[args.store]()
        configs = wire(3, links, upstream, store)
        replicas = [Replica(f"r{i}", procs, args.idem, workdir, c) for i, c in enumerate(configs)]
        for r in replicas:
            r.wait_ready()
        t0 = time.monotonic()
        player = schedule.Player(faults, replicas, store, upstream, links, clock)
        workload = Workload(seed, replicas, clock, duration, args.rate)
        oncall = Operator(seed, replicas, upstream, clock)
        player.start()
        oncall.start()
        workload.run()
        player.join()
        player.heal()
        print(f"nemesis: traffic done at {clock():.1f}s; waiting for the callers", flush=True)
        workload.wait()
        oncall.stop()
        for r in replicas:
            r.wait_ready(60)
        time.sleep(LEASE + 1.5)   # every lease left behind has run out
        print(f"nemesis: settling {len(workload.intents)} intents at {clock():.1f}s", flush=True)
        check.settle(workload.intents, replicas, clock, LEASE)
        listed, truncated = check.unknown_listing(replicas)
        violations, explained = check.judge(workload.intents, upstream, faults, listed, LEASE,
                                            UPSTREAM_TIMEOUT)
        check.dump(os.path.join(workdir, "history.json"), workload.intents, upstream, faults,
                   oncall.resolutions)
        if truncated:
            violations.append(("unknown-listing", "-", "GET /v1/unknown was truncated"))
        replay = f"bash scripts/nemesis.sh --minutes {args.minutes:g} --store {args.store} " \
            f"--seed {seed}" + (f" --faults {args.faults}" if kinds != set(schedule.ALL) else "")
        check.summary(replay, seed, args.store, args.minutes, workload.intents, workload, faults,
                      upstream, violations, explained, listed, player.errors, oncall)
        return 1 if violations else 0
    finally:
        procs.stop_all()
        links.stop()
        upstream.stop()
        if args.workdir is None and "violations" in locals() and not violations:
            shutil.rmtree(workdir, ignore_errors=True)   # a passing run's logs are not kept


if __name__ == "__main__":
    sys.exit(main())
