#!/usr/bin/env python3
"""Where one scenario's CPU goes: idem, Redis, the upstream and wrk, per request.

    python3 bench/split.py --scenario fresh_redis [--runs 3] [--duration 8]

Starts its own upstream, Redis and idem (bench/run.py's pieces, fresh processes per run),
drives one scenario with `wrk -t2 -c32` after a warm-up, and prints for each process
the user and system CPU per request (from /proc/<pid>/stat; wrk's from the rusage of
the children), how busy the whole machine was, and — for Redis — how many commands it
read per read call. On a 2-core machine all four share, the throughput ratio to a
direct connection is about (upstream + wrk per request) / (sum of all four), so this
shows which process a change has to make cheaper. docs/benchmarks.md quotes it.

    python3 bench/split.py --scenario passthrough --perf
    python3 bench/split.py --scenario nginx_passthrough --perf

add a `perf record` of the proxy (or `--perf redis|upstream`) during the measured run
and split its CPU into components: kernel, tokio, hyper, the allocator, idem's own
code… (bench/components.py; needs Debian's linux-perf).
"""
import argparse
import os
import resource
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import components  # noqa: E402
import run  # noqa: E402

SCENARIOS = {
    # name: (wrk script, target, path)
    "direct": ("fixed.lua", "upstream", "/plain"),
    "direct_keyed": ("unique.lua", "upstream", "/charges"),
    "passthrough": ("fixed.lua", "idem", "/plain"),
    "fresh_redis": ("unique.lua", "idem", "/charges"),
    "replay_redis": ("replay.lua", "idem", "/charges"),
    "nginx_passthrough": ("fixed.lua", "nginx", "/plain"),
}


def machine():
    """/proc/stat's first line (user, nice, system, idle, iowait, irq, softirq, …), then
    the context switches since boot."""
    with open("/proc/stat") as f:
        lines = f.read().splitlines()
    ctxt = next(int(line.split()[1]) for line in lines if line.startswith("ctxt "))
    return [int(x) for x in lines[0].split()[1:]] + [ctxt]


def redis_stats(redis):
    stats = {}
    for line in redis.cli("INFO", "stats").splitlines():
        key, _, value = line.partition(":")
        if value.strip().isdigit():
            stats[key] = int(value)
    return stats


def one_run(args, bins, workdir, rnd):
    script, target, path = SCENARIOS[args.scenario]
    up_port = run.free_port()
    upstream = run.Proc("upstream", [bins["upstream"], "--listen", f"127.0.0.1:{up_port}",
                                     "--threads", "2"], workdir)
    run.wait_port(up_port)
    redis = run.Redis(workdir)
    idem = run.Idem(bins, workdir, up_port, "redis", redis, workers=args.idem_workers)
    nginx = run.Nginx(workdir, up_port) if target == "nginx" else None
    perf_out = os.path.join(workdir, f"perf-{rnd}.data")
    try:
        port = {"idem": idem.port, "nginx": nginx and nginx.port}.get(target, up_port)
        run_id = f"split{rnd}x{os.getpid()}"
        if script == "replay.lua":
            code, text = run.loadtest(bins, [
                "--target", f"http://127.0.0.1:{port}", "--run-id", run_id,
                "--intents", "100", "--duplicates", "1", "--concurrency", "8",
                "--path-template", path, "--body", run.BODY, "--duration-limit", "20s"])
            if code != 0:
                raise RuntimeError(f"replay warm-up failed:\n{text}")
        run.wrk(args, workdir, port, script, path, 2, env={"RUN": run_id + "w"})
        pids = {"idem": [idem.pid], "redis": [redis.proc.pid], "upstream": [upstream.pid]}
        if nginx:
            pids["nginx"] = nginx.pids
        profiled = args.perf and (target if args.perf == "proxy" else args.perf)
        before = {name: run.cpu_times(p) for name, p in pids.items()}
        stats0, cpu0 = redis_stats(redis), machine()
        wrk0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        perf = profiled and components.record(pids[profiled], args.duration - 1, perf_out)
        result = run.wrk(args, workdir, port, script, path, args.duration, env={"RUN": run_id})
        if perf:
            perf.wait()
        wrk1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        stats1, cpu1 = redis_stats(redis), machine()
        after = {name: run.cpu_times(p) for name, p in pids.items()}
    finally:
        if nginx:
            nginx.stop()
        idem.stop()
        redis.proc.stop()
        upstream.stop()

    n = max(1, result["requests"])
    per_tick = 1e6 / run.CLK_TCK / n
    rows = {name: ((after[name][0] - before[name][0]) * per_tick,
                   (after[name][1] - before[name][1]) * per_tick) for name in pids}
    rows["wrk"] = ((wrk1.ru_utime - wrk0.ru_utime) * 1e6 / n,
                   (wrk1.ru_stime - wrk0.ru_stime) * 1e6 / n)
    spent = [b - a for a, b in zip(cpu0, cpu1)]
    switches = spent.pop()
    busy = 1 - (spent[3] + spent[4]) / max(1, sum(spent))
    rps = result["requests"] / (result["duration_us"] / 1e6)
    print(f"run {rnd}: {args.scenario} {rps:,.0f} req/s, machine {busy:.0%} busy, "
          f"{switches / n:.1f} context switches per request")
    for name, (user, system) in rows.items():
        if user + system > 0:
            print(f"  {name:9s} {user + system:6.1f} µs/req  (user {user:5.1f}, system {system:5.1f})")
    total = sum(u + s for u, s in rows.values())
    print(f"  {'total':9s} {total:6.1f} µs/req")
    reads = stats1.get("total_reads_processed", 0) - stats0.get("total_reads_processed", 0)
    commands = (stats1.get("total_commands_processed", 0)
                - stats0.get("total_commands_processed", 0))
    if reads and args.scenario.endswith("_redis"):
        print(f"  redis read {commands / reads:.1f} commands per read call "
              "(commands run inside scripts included)")
    if perf:
        components.print_shares(profiled, perf_out, sum(rows[profiled]))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", choices=sorted(SCENARIOS), default="fresh_redis")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2, help="wrk threads")
    ap.add_argument("--idem-workers", type=int, default=0, help="0: idem's default (auto)")
    ap.add_argument("--perf", nargs="?", const="proxy",
                    choices=["proxy", "idem", "nginx", "redis", "upstream"],
                    help="also profile one process with perf (default: the scenario's "
                    "target — idem, nginx, or the upstream for direct) and print its CPU "
                    "by component (bench/components.py)")
    ap.add_argument("--bin-dir", default=os.path.join(run.ROOT, "target", "release"))
    args = ap.parse_args()
    target = SCENARIOS[args.scenario][1]
    if args.perf in ("idem", "nginx") and args.perf != target:
        ap.error(f"--perf {args.perf}: the {args.scenario} scenario is not aimed at it")
    bins = {"idem": os.path.join(args.bin_dir, "idem"),
            "upstream": os.path.join(args.bin_dir, "idem-bench-upstream")}
    with tempfile.TemporaryDirectory(prefix="idem-split-") as workdir:
        for rnd in range(1, args.runs + 1):
            one_run(args, bins, workdir, rnd)


if __name__ == "__main__":
    main()
