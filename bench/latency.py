"""The added-latency phase of the benchmark (issue 36 §3), called by bench/run.py.

What an agent engineer asks is "what does idem add to my tool call", not "how many
requests per second". So for passthrough, fresh intents on Redis and replays on Redis:

1. the saturation: idem's throughput in that scenario with this phase's own generator in
   closed loop (`idem-bench-rate --rate max`, as many connections as the open-loop
   points), so that the generator's CPU, which on a small machine competes with idem's,
   is in it. wrk's figure from the rounds above is shown beside it: wrk is cheaper per
   request than a hyper client, so 90% of wrk's rate can be more than the machine can
   serve with this generator, and the queue would grow without bound;
2. at 50% and 90% of it, the same constant arrival rate sent to the upstream directly and
   to idem in front of it, by `idem-bench-rate` (bench/rate), an *open-loop* generator:
   request i is due at t0 + i/rate whatever the server did before, and its latency is
   its completion minus that due time. wrk is closed-loop and would not send the requests
   a stalled server holds up, so it never measures their wait (coordinated omission);
3. the added latency: idem's p50 and p99 minus direct's, at the same rate. Each point is
   `--latency-repeats` short runs of each, direct and idem alternating (direct, idem,
   idem, direct, ...), and each figure the median of its runs: on a shared machine, a
   burst of someone else's work then spoils one run, not a whole side.

Every answer must be 2xx; anything else (and any transport error or timeout) is counted
as an error and shown. Standard library only, like run.py.
"""

import json
import os
import statistics
import subprocess
import time

BODY = '{"amount":100,"currency":"eur"}'

# name (bench/run.py's scenario whose idem throughput is the saturation), label, idem's
# store, path, key mode of the generator.
SCENARIOS = [
    ("passthrough", "passthrough", "memory", "/plain", "none"),
    ("fresh_redis", "fresh, Redis", "redis", "/charges", "unique"),
    ("replay_redis", "replay, Redis", "redis", "/charges", "same"),
]


def add_options(ap):
    ap.add_argument("--latency", type=int, default=1,
                    help="the added-latency phase, open loop at 50%% and 90%% of idem's "
                         "saturation (0: skip)")
    ap.add_argument("--latency-duration", type=float, default=2,
                    help="seconds per measured run of the latency phase")
    ap.add_argument("--latency-repeats", type=int, default=3,
                    help="runs per point and target, direct and idem alternating; the "
                         "point is their median")
    ap.add_argument("--latency-warmup", type=float, default=0.5,
                    help="seconds at the run's rate before it is measured")
    ap.add_argument("--latency-saturation", type=float, default=3,
                    help="seconds of the closed-loop run that finds the saturation")
    ap.add_argument("--latency-loads", default="0.5,0.9",
                    help="shares of the saturation throughput, comma-separated")
    ap.add_argument("--latency-connections", type=int, default=64,
                    help="keep-alive connections of the open-loop generator")


def rate_bin(bin_dir, root):
    """idem-bench-rate: beside the other binaries, else in this checkout's release dir."""
    for d in (bin_dir, os.path.join(root, "target", "release")):
        p = os.path.join(d, "idem-bench-rate")
        if os.path.exists(p):
            return p
    return None


def generate(args, binary, url, rate, keys, prefix, duration=None):
    """One run of the generator; `rate` None: closed loop (`--rate max`)."""
    duration = duration or args.latency_duration
    argv = [binary, "--rate", "max" if rate is None else f"{rate:.0f}",
            "--duration", str(duration),
            "--warmup", str(args.latency_warmup),
            "--connections", str(args.latency_connections),
            "--method", "POST", "--body", BODY, "--header", "Content-Type: application/json",
            "--keys", keys, "--key-prefix", prefix, url]
    r = subprocess.run(argv, capture_output=True, text=True,
                       timeout=duration + args.latency_warmup + 60)
    if r.returncode != 0:
        raise RuntimeError(f"idem-bench-rate failed ({r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout)


def phase(args, ctx, results, run):
    """Runs the phase; returns what the report and the chart need (JSON-able)."""
    binary = ctx["bins"].get("rate")
    only = set(filter(None, args.only.split(",")))
    chosen = [s for s in SCENARIOS if not only or s[0] in only]
    loads = [float(x) for x in args.latency_loads.split(",") if x.strip()]
    out = {"loads": loads, "duration": args.latency_duration,
           "repeats": args.latency_repeats, "saturation_s": args.latency_saturation,
           "warmup": args.latency_warmup, "connections": args.latency_connections,
           "points": []}
    if not binary:
        run.log("latency phase skipped: idem-bench-rate not built "
                "(cargo build --release -p idem-bench-rate)")
        out["skipped"] = "idem-bench-rate not built"
        return out
    upstream = ctx["upstream_port"]
    by = {}
    for r in results:
        by.setdefault(r["scenario"], []).append(r)
    for name, label, store, path, keys in chosen:
        wrk_rps = run.median_round(by[name])["rps"] if name in by else None
        if store == "redis":
            ctx["redis"].cli("FLUSHALL")
        idem = run.Idem(ctx["bins"], ctx["workdir"], upstream, store, ctx["redis"],
                        workers=args.idem_workers, store_extra=ctx.get("store_extra", ""))
        try:
            sat = generate(args, binary, f"http://127.0.0.1:{idem.port}{path}", None, keys,
                           f"lat-{name}-sat-{os.getpid()}-{time.time_ns()}",
                           duration=args.latency_saturation)
            saturation = sat["rate"]
            run.log(f"latency {name}: saturation {saturation:,.0f} req/s closed loop, "
                    f"{sat['connections']} connections (errors {sat['errors']}); wrk: "
                    + (f"{wrk_rps:,.0f}" if wrk_rps else "—"))
            for load in loads:
                rate = saturation * load
                point = {"scenario": name, "label": label, "load": load,
                         "saturation_rps": saturation, "saturation_errors": sat["errors"],
                         "wrk_rps": wrk_rps, "rate": rate,
                         # Other work on the machine: the 1-minute load average before.
                         "loadavg": os.getloadavg()[0]}
                runs = {"direct": [], "idem": []}
                for k in range(args.latency_repeats):
                    order = [("direct", upstream), ("idem", idem.port)]
                    for who, port in order[::-1] if k % 2 else order:
                        run.http("POST", f"http://127.0.0.1:{upstream}/reset")
                        prefix = f"lat-{name}-{load}-{who}-{k}-{os.getpid()}-{time.time_ns()}"
                        runs[who].append(generate(args, binary,
                                                  f"http://127.0.0.1:{port}{path}", rate,
                                                  keys, prefix))
                for who, rs in runs.items():
                    point[who] = combine(rs)
                point["added_p50_us"] = point["idem"]["p50_us"] - point["direct"]["p50_us"]
                point["added_p99_us"] = point["idem"]["p99_us"] - point["direct"]["p99_us"]
                out["points"].append(point)
                d, i = point["direct"], point["idem"]
                run.log(f"  {load * 100:.0f}% = {rate:,.0f} req/s: direct p50 "
                        f"{d['p50_us']:.0f} µs p99 {d['p99_us']:.0f} µs; idem p50 "
                        f"{i['p50_us']:.0f} µs p99 {i['p99_us']:.0f} µs; added p50 "
                        f"{point['added_p50_us']:+.0f} µs p99 {point['added_p99_us']:+.0f} µs"
                        f"; errors {d['errors']}/{i['errors']}")
        finally:
            idem.stop()
    return out


def combine(runs):
    """One side of a point: the median of each figure over its runs, errors summed."""
    out = {k: statistics.median(r[k] for r in runs)
           for k in ("rate", "p50_us", "p90_us", "p99_us", "p999_us", "lag_p50_us",
                     "lag_p99_us", "service_p50_us", "service_p99_us", "conn_wait_p99_us")}
    out["max_us"] = max(r["max_us"] for r in runs)
    out["errors"] = sum(r["errors"] for r in runs)
    out["requests"] = sum(r["requests"] for r in runs)
    out["max_in_flight"] = max(r["max_in_flight"] for r in runs)
    out["runs"] = runs
    return out


def fmt(us):
    return f"{us:,.0f}"


def markdown(lat, svg_name=None):
    """The report's section: the table, and how it was measured."""
    lines = []
    add = lines.append
    add("")
    add("## Added latency over direct (open loop)")
    add("")
    if lat.get("skipped"):
        add(f"Skipped: {lat['skipped']}.")
        return "\n".join(lines) + "\n"
    loads = ", ".join(f"{x * 100:.0f}%" for x in lat["loads"])
    add(f"At {loads} of idem's saturation throughput in each scenario, "
        "`idem-bench-rate` (bench/rate) sends a constant arrival rate, the same to the "
        "upstream directly and to idem in front of it: request i is due at t0 + i/rate, "
        "and its latency is its completion minus that due time, so time spent waiting "
        "behind a slow answer is counted (no coordinated omission). "
        f"{lat['connections']} keep-alive connections; each point is "
        f"{lat.get('repeats', 1)} runs of {lat['duration']:g} s (after {lat['warmup']:g} s "
        "at the same rate, not recorded) to each target, direct and idem alternating, and "
        "each figure the median of its runs. Added = idem − direct, "
        "in µs. Passthrough: fixed-body POST on an unmatched path; fresh: a new "
        "Idempotency-Key per request; replay: one completed key, every request a replay. "
        "The saturation is idem's throughput with the same generator in closed loop "
        "(`--rate max`, same connections), so that the generator's own CPU, on the same "
        "cores, is counted; wrk's throughput from the rounds above is shown beside it.")
    add("")
    add("| scenario | load | rate req/s (saturation; wrk) | direct p50 | idem p50 | **added p50** | "
        "direct p99 | idem p99 | **added p99** | idem p99.9 | errors (direct/idem) | "
        "send lag p99 (direct/idem) | of which connection wait | load avg |")
    add("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    held = False
    for p in lat["points"]:
        d, i = p["direct"], p["idem"]
        # The machine, not the server, held the requests: on either side, the send lag
        # less the wait for a free connection (that wait is the server's queueing) is
        # half the added p99 or more, so the difference is the scheduler's as much as
        # idem's.
        mark = ""
        if any(x["lag_p99_us"] - x.get("conn_wait_p99_us", 0)
               >= 0.5 * abs(p["added_p99_us"]) for x in (d, i)):
            mark, held = " †", True
        wrk = f"{p['wrk_rps']:,.0f}" if p.get("wrk_rps") else "—"
        add(f"| {p['label']} | {p['load'] * 100:.0f}% | {p['rate']:,.0f} "
            f"({p['saturation_rps']:,.0f}; {wrk}) | "
            f"{fmt(d['p50_us'])} | {fmt(i['p50_us'])} | **{p['added_p50_us']:+,.0f}** | "
            f"{fmt(d['p99_us'])} | {fmt(i['p99_us'])} | **{p['added_p99_us']:+,.0f}**{mark} | "
            f"{fmt(i['p999_us'])} | {d['errors']}/{i['errors']} | "
            f"{fmt(d['lag_p99_us'])}/{fmt(i['lag_p99_us'])} | "
            f"{fmt(d.get('conn_wait_p99_us', 0))}/{fmt(i.get('conn_wait_p99_us', 0))} | "
            f"{p.get('loadavg', 0):.1f} |")
    add("")
    if held:
        add("†: on one side, the send lag p99 less the wait for a free connection is half "
            "the added p99 or more: requests were held before they were sent (the "
            "generator descheduled by other work on the machine), so this difference says "
            "as much about the machine as about idem.")
        add("")
    short = [p for p in lat["points"]
             if min(p["direct"]["rate"], p["idem"]["rate"]) < 0.97 * p["rate"]]
    if short:
        add("Points where the achieved rate fell below 97% of the target (the server, or "
            "the machine, did not keep up): "
            + ", ".join(f"{p['label']} {p['load'] * 100:.0f}% (direct "
                        f"{p['direct']['rate']:,.0f}, idem {p['idem']['rate']:,.0f})"
                        for p in short) + ".")
        add("")
    add("Send lag is how late the generator put requests on the wire after their due "
        "time (its own pacing, being descheduled, and waiting for a free connection, "
        "which is the server's queueing and is counted); it is part of both latencies, "
        "direct and idem alike. Load avg: the 1-minute "
        "load average before the point (the machine's cores: see above).")
    if svg_name:
        add("")
        add(f"![added latency over direct]({svg_name})")
    return "\n".join(lines) + "\n"
