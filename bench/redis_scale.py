#!/usr/bin/env python3
"""Fresh reservations per second per Redis core: the reservation script of
src/store/redis/scripts.rs driven with many connections and no idem in the way, against
the plain `SET k v NX GET PX` (issue 48's scale figure).

    python3 bench/redis_scale.py [--requests 200000] [--clients 64]
                                 [--before FILE]   # a scripts.rs of an earlier commit

Starts its own redis-server (`--save "" --appendonly no`, a free loopback port) and, for
each command, `redis-benchmark -c CLIENTS` on new random keys (a record of idem's shape,
554 bytes). Reads Redis's process CPU (`INFO cpu`, user + sys) and wall time around each
run: requests per CPU second is what one Redis core (Redis executes commands on one
thread) sustains when it is the bottleneck. Also a replay (the script on a completed key)
against `GET`. With `--before`, the same for that file's scripts, in the same run.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402
from callgrind_redis import snapshot  # noqa: E402

ROOT = run.ROOT
META = ('\n{"route":"charge","scope":"","key":"u-bench-0-000000","fingerprint":"' + "0" * 64
        + '","credentials":"' + "0" * 64 + '","attempt":1,"created_at_ms":1764000000000,'
        '"expires_at_ms":1764000000000,"status":null,"headers":[],"body_stored":false,'
        '"trace":"' + "0" * 32 + '","sent_at_ms":1764000000000,"format":1}\n')
IN_PROGRESS = "P" + "a" * 32 + META
COMPLETED = ("C" + "a" * 32 + META.replace('"status":null', '"status":201')
             .replace('"body_stored":false', '"body_stored":true')
             + '{"id":"ch_000000","amount":100,"currency":"eur","status":"succeeded"}')
KEY = "idem:" + "0" * 52 + "__rand_int__"
REPLAYED_KEY = "idem:" + "1" * 64


def reserve_script(path):
    """The reservation script as `Scripts::with` assembles it from `path`."""
    src = open(path).read()

    def const(name):
        m = re.search(r"const " + name + r': &str = r#?"(.*?)"#?;', src, re.S)
        return m.group(1) if m else ""

    order = re.search(r'reserve: script\(&format!\("([^"]*)"\)\)', src).group(1)
    return "".join(const(name) for name in re.findall(r"\{(\w+)\}", order))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=200000)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--before", metavar="FILE", help="scripts.rs of an earlier commit")
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="idem-redis-scale-")
    redis = run.Redis(workdir)
    try:
        sources = [("idem", os.path.join(ROOT, "src/store/redis/scripts.rs"))]
        if args.before:
            sources.insert(0, ("idem before", args.before))
        rows = []
        ttl, lease = "86400000", "10000"
        for who, path in sources:
            sha = redis.cli("SCRIPT", "LOAD", reserve_script(path)).strip()
            rows.append((f"{who}: reservation script, fresh key",
                         ["EVALSHA", sha, "1", KEY, IN_PROGRESS, ttl, lease], True))
            rows.append((f"{who}: reservation script, completed key (replay)",
                         ["EVALSHA", sha, "1", REPLAYED_KEY, IN_PROGRESS, ttl, lease], False))
        rows.append(("plain: `SET k v NX GET PX`, fresh key",
                     ["SET", KEY, IN_PROGRESS, "NX", "GET", "PX", ttl], True))
        rows.append(("plain: `GET`, completed key", ["GET", REPLAYED_KEY], False))
        print(f"{args.requests} requests, redis-benchmark -c {args.clients}, Redis 7 "
              f"(`{redis.cli('INFO', 'server').split('redis_version:')[1].split()[0]}`):")
        print()
        print(f"Records: in progress {len(IN_PROGRESS)} bytes, completed {len(COMPLETED)}.")
        print()
        print("| command | requests/s (wall) | commandstats µs | Redis CPU µs per request "
              "| requests per Redis CPU second |")
        print("|---|---:|---:|---:|---:|")
        for label, command, fresh in rows:
            redis.cli("FLUSHALL")
            redis.cli("SET", REPLAYED_KEY, COMPLETED)
            redis.cli("CONFIG", "RESETSTAT")
            cpu0, t0 = snapshot(redis)[1], time.monotonic()
            subprocess.run(["redis-benchmark", "-p", str(redis.port), "-n", str(args.requests),
                            "-c", str(args.clients), *(["-r", "100000000"] if fresh else []),
                            *command], capture_output=True, check=True)
            cpu1, t1 = snapshot(redis)[1], time.monotonic()
            per = (cpu1 - cpu0) * 1e6 / args.requests
            top = command[0].lower()
            usec = re.search(r"cmdstat_" + top + r":calls=\d+,usec=\d+,usec_per_call=([\d.]+)",
                             redis.cli("INFO", "commandstats")).group(1)
            print(f"| {label} | {args.requests / (t1 - t0):,.0f} | {float(usec):.2f} | {per:.1f} "
                  f"| {1e6 / per:,.0f} |")
    finally:
        redis.proc.stop()


if __name__ == "__main__":
    main()
