#!/usr/bin/env python3
"""Cross-replica wake-up soak (issue 31 §4): are waiting duplicates woken by the
completion, or only by their ≤ 1 s safety timer?

Three idem replicas on one private Redis, `on_concurrent: wait`, the bench upstream
behind them. `idem loadtest` runs once per replica, all three at once with one
`--run-id`, so every intent is sent DUPLICATES times through each replica (12 in all
by default) and most duplicates wait on a call another replica holds. Afterwards:

- executions at the upstream (its own counts) must equal the intents, with 0 errors;
- `idem_duplicate_wakeups_total{by}` per replica: `timer` wake-ups are waits the
  completion's notification did not end (a lost wake-up costs up to 1 s);
- each replica's latency percentiles, p99.9 included, from its loadtest.

    cargo build --release --bin idem --bin idem-bench-upstream
    python3 bench/wakeup_soak.py [--intents 30000] [--duplicates 4] [--concurrency 64]
                                 [--bin-dir OTHER/target/release]

Everything runs on free loopback ports and is stopped at the end.
"""

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import redis_modes  # noqa: E402
from redis_modes import Procs  # noqa: E402
from run import free_port  # noqa: E402


def wakeups(admin):
    """`idem_duplicate_wakeups_total` of one replica, by what woke the waiter."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=2).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("idem_duplicate_wakeups_total{"):
            by = line.split('by="', 1)[1].split('"', 1)[0]
            out[by] = out.get(by, 0) + int(float(line.split()[-1]))
    return out


def loadtest(port, args, run):
    return subprocess.Popen(
        [os.path.join(redis_modes.BIN, "idem"), "loadtest", "--target", f"http://127.0.0.1:{port}",
         "--path-template", "/charges", "--intents", str(args.intents),
         "--duplicates", str(args.duplicates), "--concurrency", str(args.concurrency),
         "--run-id", run, "--json", "--duration-limit", "600s", "--progress-interval", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--intents", type=int, default=30000)
    parser.add_argument("--duplicates", type=int, default=4, help="per replica")
    parser.add_argument("--concurrency", type=int, default=64, help="per loadtest")
    parser.add_argument("--bin-dir", default=redis_modes.BIN,
                        help="release binaries to run (another commit's target/release)")
    args = parser.parse_args()
    redis_modes.BIN = os.path.abspath(args.bin_dir)
    procs = Procs()
    try:
        upstream = free_port()
        procs.start([os.path.join(redis_modes.BIN, "idem-bench-upstream"), "--listen",
                     f"127.0.0.1:{upstream}", "--threads", "1"], upstream)
        redis = procs.redis()
        route = "    on_concurrent: wait\n    wait_timeout: 10s\n"
        replicas = [procs.idem(upstream, f"    url: redis://127.0.0.1:{redis}/0\n", route)
                    for _ in range(3)]
        run = f"soak{time.time_ns()}"
        started = time.time()
        runs = [loadtest(port, args, run) for port, _, _ in replicas]
        reports = []
        for p in runs:
            out, err = p.communicate(timeout=900)
            if p.returncode not in (0, 1):
                raise RuntimeError(out + err)
            reports.append(json.loads(out))
        elapsed = time.time() - started
        time.sleep(0.3)
        stats = json.loads(urllib.request.urlopen(
            f"http://127.0.0.1:{upstream}/stats", timeout=2).read())

        total = args.intents * args.duplicates * 3
        print(f"{args.intents:,} intents x {args.duplicates * 3} sends over 3 replicas "
              f"({total:,} requests, concurrency {args.concurrency} per replica), "
              f"{elapsed:.1f} s\n")
        print(f"upstream: {stats['executions']:,} executions of {stats['keys']:,} keys, "
              f"{stats['duplicated_keys']} executed more than once\n")
        print("| replica | errors | by notification | by timer | p50 ms | p99 ms "
              "| p99.9 ms | max ms |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        timers = 0
        for i, ((_, admin, _), r) in enumerate(zip(replicas, reports)):
            w = wakeups(admin)
            timers += w.get("timer", 0)
            lat = r["latency_ms"]
            print(f"| r{i} | {r['errors']} | {w.get('notification', 0):,} | "
                  f"{w.get('timer', 0):,} | {lat['p50']:.2f} | {lat['p99']:.2f} | "
                  f"{lat['p99.9']:.2f} | {lat['max']:.2f} |")
        ok = (stats["executions"] == args.intents and stats["duplicated_keys"] == 0
              and all(r["errors"] == 0 for r in reports))
        print(f"\nexactly once, no errors: {'yes' if ok else 'NO'}; timer wake-ups: {timers}")
        return 0 if ok else 1
    finally:
        procs.close()


if __name__ == "__main__":
    sys.exit(main())
