#!/usr/bin/env python3
"""Instructions one Redis command costs the client: redis-rs's multiplexer (what idem's
store uses, with and without `ConnectionManager`'s reconnecting wrapper) against one
socket driven by the caller with redis-rs's own packing and parser (what a
connection-per-worker client would cost).

    python3 bench/redis_client_cost.py [--commands 5000]

Builds `examples/redis_client_cost.rs` in release mode, starts a private redis-server
on a free loopback port, and runs the example under `valgrind --tool=callgrind` with N
and 2N commands per mode; (I(2N) - I(N)) / N is the client's cost of one command, with
start-up and connection set-up cancelled out, as bench/callgrind.py counts a request.
Each command is one `SET` of a 300-byte value, sent and answered one at a time on a
current-thread runtime. The figure is user-space instructions of the client process
only (Redis's own work is not counted).
"""
import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402
import callgrind_targets as targets  # noqa: E402
from callgrind import total_instructions  # noqa: E402

MODES = ("multiplexed", "multiplexed-plain", "direct")


def instructions(binary, url, mode, n, workdir):
    out = os.path.join(workdir, f"callgrind-{mode}-{n}.out")
    subprocess.run(targets.under_callgrind(out, [binary, url, mode, str(n)]), check=True)
    return total_instructions(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commands", type=int, default=5000)
    args = ap.parse_args()
    for tool in ("valgrind", "redis-server"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            sys.exit(f"{tool} not found: apt-get install valgrind redis-server")
    subprocess.run(["cargo", "build", "--release", "--locked", "--example",
                    "redis_client_cost"], cwd=run.ROOT, check=True)
    binary = os.path.join(run.ROOT, "target", "release", "examples", "redis_client_cost")
    n = args.commands
    with tempfile.TemporaryDirectory(prefix="idem-redis-client-") as workdir:
        redis = run.Redis(workdir)
        try:
            url = f"redis://127.0.0.1:{redis.port}/"
            print(f"Instructions per command, client side: ({n} vs {2 * n} sequential "
                  "SETs of 300 bytes) / N, callgrind")
            print()
            print("| client | instructions per command |")
            print("|---|---:|")
            for mode in MODES:
                small = instructions(binary, url, mode, n, workdir)
                large = instructions(binary, url, mode, 2 * n, workdir)
                print(f"| {mode} | {(large - small) / n:,.0f} |")
        finally:
            redis.proc.stop()


if __name__ == "__main__":
    main()
