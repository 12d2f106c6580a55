#!/usr/bin/env python3
"""Instructions per request in idem beside nginx, counted by callgrind (repeatable,
unlike timings).

    python3 bench/callgrind.py [--requests 2000] [--only passthrough,fresh-redis]
                               [--traces off,1,0.01] [--bin-dir target/release]
                               [--no-nginx] [--no-floor] [--before DIR]
                               [--peer-bin PATH]

For each scenario, idem (one worker) runs under `valgrind --tool=callgrind` twice: once
serving N requests and once serving 2N, one keep-alive connection, sequentially. The
difference of the two totals divided by N is the cost of one request, with start-up and
shutdown cancelled out. It counts idem's instructions only (user space, every thread),
not the kernel's, the upstream's or Redis's. Compare two commits with the same binary
flags: the count does not depend on what else the machine is doing.

nginx is measured the same way beside it, sent the same requests (path, headers, body)
as each idem scenario: `proxy_pass` to the same upstream, one process (`daemon off;
master_process off;`, so that valgrind counts the process that serves), upstream
keepalive, access log off. The table gives both and the ratio idem/nginx, so "how far
from nginx" is one command. `--no-nginx` leaves it out.

The floor (bench/floor, `idem-floor`) is measured beside idem in the same run: the
smallest correct proxies built from idem's own crates, allocator and profile. Each idem
scenario is printed with its floor and the ratio: passthrough against the floor's
passthrough, a fresh intent on Redis against one `SET NX GET PX` + forward + one `SET`,
a replay against one `GET`, and a fresh intent on the memory store against the
passthrough floor (its key and record are the difference). `--no-floor` leaves it out.

`--before DIR` measures a second idem binary (an earlier build, e.g. of the commit
before a change) in every scenario of the same run, interleaved with this one, and prints
both with the change: "before and after" in one command, on one machine state.

For every process that used Redis, a second table gives Redis's own cost per request:
the commands, their `INFO commandstats` time and Redis's CPU time (callgrind_redis.py).

`--breakdown` adds, for every process measured, its instructions per request by
component (the crate each function's symbol names: hyper, tokio, http, redis-rs, the
allocator, idem's own code…) and its largest functions (bench/callgrind_breakdown.py).
`--syscalls` counts system calls per request instead (`strace -f -c`, same N vs 2N
method), by name with `--breakdown`. `--keep` keeps the output files.

Scenarios: passthrough (no route matches), fresh intents (memory, Redis), replays
(Redis). Needs valgrind, redis-server and nginx (installed from Debian when missing, as
bench/run.sh does) and release binaries (cargo build --release --bins -p idem -p
idem-floor).

`--traces` runs each scenario once per tracing setting: `off` (no OTLP endpoint, the
default) or a sampling ratio, with idem exporting to a local OTLP/HTTP sink
(bench/otlp_sink.py) through the standard OTEL_* variables. The exporter's thread is
counted too: the figure is the whole cost of tracing a request.

"""

import argparse
import base64
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import callgrind_breakdown as breakdown  # noqa: E402
import callgrind_redis as redis_usage  # noqa: E402
from callgrind_measure import measure, per_request, print_syscalls  # noqa: E402
import callgrind_targets as targets  # noqa: E402
import run  # noqa: E402  (the orchestrator's process helpers)
from otlp_sink import OtlpSink  # noqa: E402

SCENARIOS = {
    # name: (store, path, key per request: "unique" | "same" | None)
    "passthrough": ("memory", "/other", None),
    "fresh-memory": ("memory", "/charges", "unique"),
    "fresh-redis": ("redis", "/charges", "unique"),
    "replay-redis": ("redis", "/charges", "same"),
}
# The cost of sealing stored responses (`store.encryption`), by response size: run with
# `--only` (not part of the default set), e.g.
#   --only fresh-redis-1k,fresh-redis-1k-sealed,replay-redis-64k,replay-redis-64k-sealed
for _size, _bytes in (("1k", 1024), ("64k", 65536)):
    for _kind, _keying in (("fresh", "unique"), ("replay", "same")):
        for _sealed in ("", "-sealed"):
            SCENARIOS[f"{_kind}-redis-{_size}{_sealed}"] = ("redis", "/charges", _keying)
DEFAULT = ["passthrough", "fresh-memory", "fresh-redis", "replay-redis"]


def floor_mode(name):
    """The floor (bench/floor) a scenario is compared with: a fresh intent on the memory
    store against the passthrough floor (the key and the record are its extra)."""
    if name.startswith("fresh-redis"):
        return "fresh"
    if name.startswith("replay-redis"):
        return "replay"
    return "passthrough"


def body_bytes(name):
    """The answer size a sealing scenario asks the upstream for (0: its small default)."""
    return {"1k": 1024, "64k": 65536}.get(name.split("-")[2] if name.count("-") >= 2 else "", 0)


def sealing(ctx, name):
    """The `store.encryption` lines of a `-sealed` scenario (a fresh key in the workdir)."""
    if not name.endswith("-sealed"):
        return ""
    key = os.path.join(ctx["workdir"], "seal.key")
    if not os.path.exists(key):
        with open(key, "w") as f:
            f.write(base64.b64encode(os.urandom(32)).decode())
    return f"  encryption:\n    keys:\n      - {{id: bench, file: {key}}}\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__ + targets.PEER_HELP,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--only", default="", help="comma-separated scenario names: "
                    + ", ".join(SCENARIOS))
    ap.add_argument("--traces", default="off",
                    help="comma-separated: off, or a sampling ratio (1, 0.01)")
    ap.add_argument("--bin-dir", default=os.path.join(run.ROOT, "target", "release"))
    ap.add_argument("--no-nginx", action="store_true", help="leave nginx out")
    ap.add_argument("--before", metavar="DIR",
                    help="also measure the idem binary in DIR (an earlier build) in each "
                         "scenario, and print it beside this one with the change")
    ap.add_argument("--no-floor", action="store_true",
                    help="leave out the floor of idem's own stack (bench/floor)")
    ap.add_argument("--breakdown", action="store_true",
                    help="after the table, each process's instructions per request by "
                         "component (crate) and its largest functions")
    ap.add_argument("--syscalls", action="store_true",
                    help="count system calls per request (strace -c) instead of "
                         "instructions; --breakdown then lists them by name")
    ap.add_argument("--keep", action="store_true",
                    help="keep the callgrind output files (their directory is printed), "
                         "for callgrind_annotate")
    ap.add_argument("--peer-bin", help="a peer idempotency proxy's binary (see \"peer\" above)")
    ap.add_argument("--peer-arg", action="append", default=[], metavar="ARG",
                    help="an argument for the peer (repeatable)")
    ap.add_argument("--peer-env", action="append", default=[], metavar="K=V",
                    help="the peer's environment (repeatable; replaces the defaults)")
    ap.add_argument("--peer-path", default=targets.PEER_PATH,
                    help="the path the peer is sent (default %(default)s)")
    args = ap.parse_args()
    names = [s for s in args.only.split(",") if s] or DEFAULT
    unknown = [s for s in names if s not in SCENARIOS]
    if unknown:
        sys.exit(f"--only: unknown scenario {', '.join(unknown)} "
                 f"(choose from {', '.join(SCENARIOS)})")
    if args.peer_bin:
        targets.check_peer(args.peer_bin)
    elif args.peer_arg or args.peer_env:
        sys.exit("--peer-arg and --peer-env need --peer-bin")
    if args.syscalls:
        targets.COUNTER["tool"] = "strace"
        if not shutil.which("strace"):
            sys.exit("strace missing: apt-get install strace")
    targets.ensure_tools(need_nginx=not args.no_nginx)
    needed = ["idem", "idem-bench-upstream"] + ([] if args.no_floor else ["idem-floor"])
    bins = {b: os.path.join(args.bin_dir, b) for b in needed}
    for b in bins.values():
        if not os.path.exists(b):
            sys.exit(f"{b} missing: cargo build --release --bins -p idem -p idem-floor")
    workdir = tempfile.mkdtemp(prefix="idem-callgrind-")
    ctx = {"workdir": workdir, "idem": bins["idem"], "floor": bins.get("idem-floor")}
    earlier = args.before and os.path.join(args.before, "idem")
    if earlier and not os.path.exists(earlier):
        sys.exit(f"--before: {earlier} missing")
    redis = run.Redis(workdir)
    ctx["redis"] = redis
    ctx["upstream_port"] = run.free_port()
    sink = OtlpSink()
    up = run.Proc("upstream", [bins["idem-bench-upstream"], "--listen",
                               f"127.0.0.1:{ctx['upstream_port']}", "--threads", "1"], workdir)
    ok = False
    try:
        run.wait_port(ctx["upstream_port"])
        n = args.requests
        what, unit = ("System calls", "syscalls") if args.syscalls else ("Instructions", "instr")

        def fmt(v):
            return f"{v:.2f}" if args.syscalls else f"{v:,.0f}"

        print(f"{what} per request: ({n} vs {2 * n} sequential keep-alive POSTs) / "
              f"{n}; idem --workers 1, nginx 1 process; {os.path.abspath(args.bin_dir)}")
        print()
        then = f" before {unit}/req | change |" if earlier else ""
        print(f"| scenario | traces | idem {unit}/req |{then} floor {unit}/req | idem/floor "
              f"| nginx {unit}/req | idem/nginx | exported B/req |")
        print("|---|---|---:|" + ("---:|---:|" if earlier else "") + "---|---:|---:|---:|---:|")
        nginx = {}  # (path, keying) -> instructions per request: one run per request shape
        floors = {}  # (mode, path, keying, size) -> (instructions, Redis) per request
        idem = {}
        tables = []  # (title, tag, total) of each process measured, for --breakdown
        redis_rows = []  # (who, callgrind_redis.PerRequest), for the Redis table
        for name in names:
            store, path, keying = SCENARIOS[name]
            for traces in args.traces.split(","):
                env = None if traces == "off" else sink.env(float(traces))
                before = sink.bytes
                extra, size = sealing(ctx, name), body_bytes(name)

                def start(out):
                    return targets.start_idem(ctx, store, out, env, extra)

                small, redis_small = measure(ctx, start, path, keying, n,
                                             f"{name}-{traces}-a", size)
                middle = sink.bytes
                large, redis_large = measure(ctx, start, path, keying, 2 * n,
                                             f"{name}-{traces}-b", size)
                exported = ((sink.bytes - middle) - (middle - before)) / n
                ours = (large - small) / n
                idem[(name, traces)] = ours
                change = ""
                if earlier:
                    now_bin, ctx["idem"] = ctx["idem"], earlier
                    try:
                        was = per_request(ctx, start, path, keying, n,
                                          f"before-{name}-{traces}", size)[0]
                    finally:
                        ctx["idem"] = now_bin
                    change = f" {fmt(was)} | {100 * (ours - was) / was:+.1f} % |"
                tables.append((f"idem {name}, traces {traces}", f"{name}-{traces}", ours))
                if store == "redis":
                    redis_rows.append((f"idem {name}",
                                       redis_usage.PerRequest(redis_small, redis_large, n)))
                floor = floor_ratio = "—"
                if not args.no_floor:
                    mode = floor_mode(name)
                    shape = (mode, path, keying, size)
                    if shape not in floors:
                        floors[shape] = per_request(
                            ctx, lambda out: targets.start_floor(ctx, mode, out), path,
                            keying, n, f"floor-{name}", size)
                        tables.append((f"floor {mode}, as {name}", f"floor-{name}",
                                       floors[shape][0]))
                        if mode != "passthrough":
                            redis_rows.append((f"floor {mode}, as {name}", floors[shape][1]))
                    floor = f"{fmt(floors[shape][0])} ({mode})"
                    floor_ratio = f"{ours / floors[shape][0]:.2f}"
                ref = ratio = "—"
                if not args.no_nginx:
                    if (path, keying) not in nginx:
                        nginx[(path, keying)] = per_request(
                            ctx, lambda out: targets.start_nginx(ctx, out), path, keying, n,
                            f"nginx-{name}")[0]
                        tables.append((f"nginx, as {name}", f"nginx-{name}",
                                       nginx[(path, keying)]))
                    ref = fmt(nginx[(path, keying)])
                    ratio = f"{ours / nginx[(path, keying)]:.2f}"
                print(f"| {name} | {traces} | {fmt(ours)} |{change} {floor} | {floor_ratio} "
                      f"| {ref} | {ratio} | {exported:,.0f} |", flush=True)
        if args.peer_bin:
            peer, peer_redis = per_request(ctx, lambda out: targets.start_peer(ctx, args, out),
                                           "/charges", "unique", n, "peer")
            redis_rows.append((f"peer {os.path.basename(args.peer_bin)}", peer_redis))
            line = f"peer {args.peer_bin}, fresh intents on Redis: {fmt(peer)} {unit}/req"
            ref = nginx.get(("/charges", "unique"))
            if ref:
                line += f", {peer / ref:.2f}× nginx"
            ours = idem.get(("fresh-redis", "off"))
            if ours:
                line += f"; idem fresh-redis {fmt(ours)}: {peer / ours:.2f}× fewer than the peer"
            print()
            print(line)
        if redis_rows and not args.syscalls:
            redis_usage.print_table(redis_rows)
        if args.breakdown:
            for title, tag, total in tables:
                files = [os.path.join(workdir, f"callgrind-{tag}-{side}-{k}.out")
                         for side, k in (("a", n), ("b", 2 * n))]
                if args.syscalls:
                    print_syscalls(title, *files, n, total)
                else:
                    breakdown.print_table(title, *breakdown.per_request(*files, n), total)
        ok = True
    finally:
        sink.stop()
        up.stop()
        redis.proc.stop()
        if ok and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        elif ok:
            print(f"callgrind files kept in {workdir}", file=sys.stderr)
        else:
            print(f"logs kept in {workdir}", file=sys.stderr)


if __name__ == "__main__":
    main()
