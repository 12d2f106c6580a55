#!/usr/bin/env python3
"""Two questions about the Redis store, answered on loopback with the release binaries:

1. What does `wait_replicas: 1` cost? Fresh intents through idem over a master with one
   replica, with and without it: latency percentiles and requests/s (`idem loadtest`).
2. How much Redis traffic does a duplicate storm cost? 200 intents x 32 concurrent
   duplicates through one idem: Redis commands idem sent (INFO commandstats, minus what
   the Lua scripts run inside Redis) per request and per duplicate. Before in-process
   coalescing every duplicate cost one `SET NX GET` (1.0 per duplicate).

Also reports the memory one stored record takes (`MEMORY USAGE`).

    cargo build --release --bin idem --bin idem-bench-upstream
    python3 bench/redis_modes.py            # about a minute

Everything runs on free loopback ports and is stopped at the end.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import free_port, wait_port  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release")


class Procs:
    def __init__(self):
        self.procs = []
        self.dir = tempfile.mkdtemp(prefix="idem-redis-bench-")

    def start(self, argv, port):
        log = open(os.path.join(self.dir, f"{os.path.basename(argv[0])}-{port}.log"), "w")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.dir)
        self.procs.append(p)
        wait_port(port)
        return p

    def redis(self, *extra):
        port = free_port()
        self.start(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "no", "--repl-diskless-sync-delay", "0", *extra], port)
        return port

    def idem(self, upstream, store_yaml, route=""):
        port, admin = free_port(), free_port()
        path = os.path.join(self.dir, f"idem-{port}.yaml")
        with open(path, "w") as f:
            f.write(f"listen: 127.0.0.1:{port}\nadmin:\n  listen: 127.0.0.1:{admin}\n"
                    f"upstream:\n  url: http://127.0.0.1:{upstream}\n"
                    f"store:\n  backend: redis\n  redis:\n{store_yaml}"
                    "routes:\n  - name: charge\n    methods: [POST]\n    path: /charges\n"
                    "    key: [\"{header.idempotency-key}\"]\n" + route)
        p = self.start([os.path.join(BIN, "idem"), "serve", "--config", path], port)
        wait_ready(admin)
        return port, admin, p

    def stop(self, p):
        p.terminate()
        p.wait(10)
        self.procs.remove(p)

    def close(self):
        for p in self.procs:
            p.kill()
            p.wait()


def wait_ready(admin):
    import urllib.request
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=1).status == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("idem not ready")


def fenced_writes(admin):
    """Completions, renewals and takeovers idem counted (each one SET inside a script)."""
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=2).read().decode()
    total = 0
    for line in text.splitlines():
        for op in ("complete", "renew", "takeover"):
            if line.startswith(f'idem_store_duration_seconds_count{{op="{op}"}}'):
                total += int(float(line.split()[-1]))
    return total


def cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True,
                          text=True, check=True).stdout


def commandstats(port):
    out = {}
    for line in cli(port, "INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_"):
            name, rest = line[len("cmdstat_"):].split(":", 1)
            out[name] = int(rest.split("calls=")[1].split(",")[0])
    return out


def loadtest(port, intents, duplicates, concurrency, run, upstream):
    r = subprocess.run([os.path.join(BIN, "idem"), "loadtest", "--target",
                        f"http://127.0.0.1:{port}", "--path-template", "/charges",
                        "--intents", str(intents), "--duplicates", str(duplicates),
                        "--concurrency", str(concurrency), "--run-id", run, "--json",
                        "--check-url", f"http://127.0.0.1:{upstream}/count?key={{key}}"],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(r.stdout + r.stderr)
    return json.loads(r.stdout)


def main():
    procs = Procs()
    try:
        upstream = free_port()
        procs.start([os.path.join(BIN, "idem-bench-upstream"), "--listen",
                     f"127.0.0.1:{upstream}", "--threads", "1"], upstream)

        print("## wait_replicas (fresh intents, master + 1 replica, concurrency 16)\n")
        master = procs.redis()
        procs.redis("--replicaof", "127.0.0.1", str(master))
        cli(master, "SET", "probe", "1")
        while cli(master, "WAIT", "1", "100").strip() != "1":
            time.sleep(0.05)
        print("| wait_replicas | req/s | p50 ms | p99 ms | errors |")
        print("| --- | --- | --- | --- | --- |")
        for n in (0, 1, 0, 1):
            port, _, p = procs.idem(upstream, f"    url: redis://127.0.0.1:{master}/0\n"
                                              f"    wait_replicas: {n}\n")
            loadtest(port, 500, 1, 16, f"warm{n}{time.time_ns()}", upstream)
            r = loadtest(port, 4000, 1, 16, f"w{n}{time.time_ns()}", upstream)
            lat = r["latency_ms"]
            print(f"| {n} | {r['requests_per_second']:,.0f} | {lat['p50']:.2f} | "
                  f"{lat['p99']:.2f} | {r['errors']} |")
            procs.stop(p)

        print("\n## duplicate storm (200 intents x 32 duplicates, one idem)\n")
        redis = procs.redis()
        port, admin, p = procs.idem(upstream, f"    url: redis://127.0.0.1:{redis}/0\n",
                                    "    on_concurrent: wait\n")
        loadtest(port, 50, 32, 256, f"warm{time.time_ns()}", upstream)
        before, ops0 = commandstats(redis), fenced_writes(admin)
        intents, dups = 200, 32
        r = loadtest(port, intents, dups, 256, f"s{time.time_ns()}", upstream)
        time.sleep(0.3)  # the last completions land
        after, ops1 = commandstats(redis), fenced_writes(admin)
        delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        # commandstats also counts what the Lua scripts run inside Redis: a GET per call,
        # a SET per successful completion, renewal or takeover, PUBLISH/DEL. idem itself
        # sends SET (reservations) and EVALSHA/EVAL (fenced writes) on the request path.
        scripts = delta.get("evalsha", 0) + delta.get("eval", 0)
        reservations = delta.get("set", 0) - (ops1 - ops0)
        sent = reservations + scripts
        requests = intents * dups
        duplicates = intents * (dups - 1)
        print("| requests | ran twice | Redis commands sent | per request | per duplicate |")
        print("| --- | --- | --- | --- | --- |")
        # The winner's own two (reserve, complete) are not the duplicates' cost.
        beyond = max(0, sent - 2 * intents)
        twice = r["double_executions"] + (r["check"] or {}).get("wrong_total", 0)
        print(f"| {requests:,} | {twice} | {sent:,} "
              f"(SET {reservations:,}, EVALSHA {scripts:,}) | {sent / requests:.3f} | "
              f"{beyond / duplicates:.3f} |")
        print(f"\nraw commandstats delta: {json.dumps(delta)}")

        # Records only: the open index (`idem:open`, a sorted set) is not one.
        keys = [k for k in cli(redis, "--scan", "--pattern", "idem:*").split()
                if k and not k.endswith("open")][:20]
        sizes = [int(cli(redis, "MEMORY", "USAGE", k)) for k in keys]
        if sizes:
            body = len(cli(redis, "GET", keys[0]))
            print(f"\nstored record: {sum(sizes) // len(sizes)} bytes (MEMORY USAGE, mean of "
                  f"{len(sizes)}); the encoded record itself is {body} bytes")
        procs.stop(p)
    finally:
        procs.close()


if __name__ == "__main__":
    sys.exit(main())
