#!/usr/bin/env python3
"""A/B two idem builds (or worker settings) on one machine, interleaved (bench/run.py's pieces).

    python3 bench/ab.py --a /tmp/base/target/release --b target/release \\
        --only passthrough,fresh_redis,replay_redis --rounds 4 --duration 4

Every round runs each scenario with build A, then build B (the order alternates by
round), against one shared upstream and Redis, so drift on a shared machine hits both
alike. Prints req/s and idem CPU µs/request per round and the median B/A ratios.
Instruction counts (callgrind) are the steadier measure for small changes; this is
the wall-clock check.
"""
import argparse
import base64
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import callgrind_targets  # noqa: E402
import run  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="bin dir of build A (idem, idem-bench-upstream)")
    ap.add_argument("--b", required=True, help="bin dir of build B")
    ap.add_argument("--only", default="passthrough,fresh_redis,replay_redis")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--duration", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--a-workers", type=int, default=0,
                    help="idem --workers for build A (0: its default)")
    ap.add_argument("--b-workers", type=int, default=0, help="the same for build B")
    ap.add_argument("--replay-keys", type=int, default=100)
    ap.add_argument("--b-encrypted", action="store_true",
                    help="run build B with store.encryption (a fresh key): with --a and --b "
                         "the same build, the cost of sealing stored responses")
    args = ap.parse_args()
    callgrind_targets.ensure_tools(
        need_nginx=False, packages={"wrk": "wrk", "redis-server": "redis-server"})

    builds = {k: {"idem": os.path.join(d, "idem"),
                  "upstream": os.path.join(d, "idem-bench-upstream")}
              for k, d in (("A", args.a), ("B", args.b))}
    wanted = args.only.split(",")
    scenarios = [s for s in run.SCENARIOS if s[0] in wanted and s[2] == "idem"]
    workdir = tempfile.mkdtemp(prefix="idem-ab-")
    ctx = {"bins": builds["A"], "workdir": workdir}
    sealed = ""
    if args.b_encrypted:
        key = os.path.join(workdir, "seal.key")
        with open(key, "w") as f:
            f.write(base64.b64encode(os.urandom(32)).decode())
        sealed = f"  encryption:\n    keys:\n      - {{id: bench, file: {key}}}\n"
    procs = []
    rows = {}
    try:
        ctx["redis"] = run.Redis(workdir)
        procs.append(ctx["redis"].proc)
        ctx["upstream_port"] = run.free_port()
        up = run.Proc("upstream", [builds["A"]["upstream"], "--listen",
                                   f"127.0.0.1:{ctx['upstream_port']}", "--threads", "2"],
                      workdir)
        procs.append(up)
        run.wait_port(ctx["upstream_port"])
        ctx["upstream"] = up
        for rnd in range(1, args.rounds + 1):
            order = ("A", "B") if rnd % 2 else ("B", "A")
            for name, _label, target, store, script, path in scenarios:
                for build in order:
                    ctx["bins"] = builds[build]
                    ctx["store_extra"] = sealed if build == "B" else ""
                    args.idem_workers = args.a_workers if build == "A" else args.b_workers
                    r = run.run_scenario(args, ctx, name, target, store, script, path, rnd)
                    rows.setdefault((name, build), []).append(r)
                    run.log(f"round {rnd} {name:14} {build}: {r['rps']:>9,.0f} req/s  "
                            f"cpu {r['cpu_us_per_req']:.1f} µs/req  "
                            f"p99 {run.fmt_ms(r['p99_us'])} ms")
    finally:
        for p in reversed(procs):
            p.stop()
    print()
    print("| scenario | A req/s | B req/s | B/A req/s | A µs/req | B µs/req | B/A p99 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, *_ in scenarios:
        a, b = rows[(name, "A")], rows[(name, "B")]
        ratio = statistics.median(y["rps"] / x["rps"] for x, y in zip(a, b))
        p99 = statistics.median(y["p99_us"] / x["p99_us"] for x, y in zip(a, b))
        med = lambda rs, k: statistics.median(r[k] for r in rs)  # noqa: E731
        print(f"| {name} | {med(a, 'rps'):,.0f} | {med(b, 'rps'):,.0f} | {ratio:.2f} | "
              f"{med(a, 'cpu_us_per_req'):.1f} | {med(b, 'cpu_us_per_req'):.1f} | {p99:.2f} |")


if __name__ == "__main__":
    main()
