#!/usr/bin/env python3
"""Instructions per request in idem, counted by callgrind (repeatable, unlike timings).

    python3 bench/callgrind.py [--requests 2000] [--only passthrough,fresh-redis]
                               [--traces off,1,0.01] [--bin-dir target/release]

For each scenario, idem (one worker) runs under `valgrind --tool=callgrind` twice: once
serving N requests and once serving 2N, one keep-alive connection, sequentially. The
difference of the two totals divided by N is the cost of one request, with start-up and
shutdown cancelled out. It counts idem's instructions only (user space, every thread),
not the kernel's, the upstream's or Redis's. Compare two commits with the same binary
flags: the count does not depend on what else the machine is doing.

Scenarios: passthrough (no route matches), fresh intents (memory, Redis), replays
(Redis). Needs valgrind, redis-server and release binaries (cargo build --release --bins).

`--traces` runs each scenario once per tracing setting: `off` (no OTLP endpoint, the
default) or a sampling ratio, with idem exporting to a local OTLP/HTTP sink
(bench/otlp_sink.py) through the standard OTEL_* variables. The exporter's thread is
counted too: the figure is the whole cost of tracing a request.
"""

import argparse
import http.client
import os
import re
import shutil
import signal
import stat
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402  (the orchestrator's process helpers)
from otlp_sink import OtlpSink  # noqa: E402

BODY = run.BODY
SCENARIOS = {
    # name: (store, path, key per request: "unique" | "same" | None)
    "passthrough": ("memory", "/other", None),
    "fresh-memory": ("memory", "/charges", "unique"),
    "fresh-redis": ("redis", "/charges", "unique"),
    "replay-redis": ("redis", "/charges", "same"),
}


def drive(port, path, keying, n, tag):
    """`n` sequential POSTs on one keep-alive connection; every answer must be 2xx."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for i in range(n):
        headers = {"content-type": "application/json"}
        if keying == "unique":
            headers["idempotency-key"] = f"cg-{tag}-{i}"
        elif keying == "same":
            headers["idempotency-key"] = "cg-replayed"
        conn.request("POST", path, body=BODY, headers=headers)
        resp = conn.getresponse()
        resp.read()
        if resp.status >= 300:
            raise RuntimeError(f"{path}: status {resp.status} on request {i}")
    conn.close()


def total_instructions(out_file):
    """Sum of `summary:`/`totals:` over the per-thread dump files."""
    total = 0
    d, base = os.path.split(out_file)
    for name in os.listdir(d):
        if not name.startswith(base):
            continue
        with open(os.path.join(d, name)) as f:
            for line in f:
                m = re.match(r"(?:summary|totals):\s+(\d+)", line)
                if m:
                    total += int(m.group(1))
                    break
    return total


def measure(ctx, name, n, tag, env=None):
    store, path, keying = SCENARIOS[name]
    workdir = ctx["workdir"]
    out = os.path.join(workdir, f"callgrind-{name}-{n}.out")
    wrapper = os.path.join(workdir, "idem-under-callgrind.sh")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\nexec valgrind --tool=callgrind --quiet "
                f"--callgrind-out-file={out} {ctx['idem']} \"$@\"\n")
    os.chmod(wrapper, stat.S_IRWXU)
    idem = run.Idem({"idem": wrapper}, workdir, ctx["upstream_port"], store,
                    redis=ctx["redis"], workers=1, env=env)
    try:
        if keying == "same":
            drive(idem.port, path, keying, 1, tag)  # the first execution, not measured
        drive(idem.port, path, keying, n, tag)
    finally:
        idem.proc.stop(signal.SIGTERM, timeout=60)
    return total_instructions(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    ap.add_argument("--traces", default="off",
                    help="comma-separated: off, or a sampling ratio (1, 0.01)")
    ap.add_argument("--bin-dir", default=os.path.join(run.ROOT, "target", "release"))
    args = ap.parse_args()
    for tool in ("valgrind", "redis-server"):
        if not shutil.which(tool):
            sys.exit(f"{tool} not found: apt-get install {tool}")
    bins = {b: os.path.join(args.bin_dir, b) for b in ("idem", "idem-bench-upstream")}
    for b in bins.values():
        if not os.path.exists(b):
            sys.exit(f"{b} missing: cargo build --release --bins")
    names = [s for s in args.only.split(",") if s] or list(SCENARIOS)
    workdir = tempfile.mkdtemp(prefix="idem-callgrind-")
    ctx = {"workdir": workdir, "idem": bins["idem"]}
    redis = run.Redis(workdir)
    ctx["redis"] = redis
    ctx["upstream_port"] = run.free_port()
    sink = OtlpSink()
    up = run.Proc("upstream", [bins["idem-bench-upstream"], "--listen",
                               f"127.0.0.1:{ctx['upstream_port']}", "--threads", "1"], workdir)
    try:
        run.wait_port(ctx["upstream_port"])
        n = args.requests
        print(f"{'scenario':14} {'traces':>7} {'instr/req':>10} {'exported B/req':>15}"
              f"   ({n} vs {2 * n} requests, idem --workers 1)")
        for name in names:
            for traces in args.traces.split(","):
                env = None if traces == "off" else sink.env(float(traces))
                before = sink.bytes
                small = measure(ctx, name, n, f"{name}-{traces}-a", env)
                middle = sink.bytes
                large = measure(ctx, name, 2 * n, f"{name}-{traces}-b", env)
                exported = ((sink.bytes - middle) - (middle - before)) / n
                print(f"{name:14} {traces:>7} {(large - small) / n:>10,.0f} {exported:>15,.0f}",
                      flush=True)
    finally:
        sink.stop()
        up.stop()
        redis.proc.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
