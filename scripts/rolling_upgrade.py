#!/usr/bin/env python3
"""The storm of scripts/rolling-upgrade.sh (standard library only).

For each store (one private Redis, one private PostgreSQL, on free loopback ports): one
idem of the old release and one of the current tree share the store and one upstream
(idem-bench-upstream, which counts executions per idempotency key and does not
deduplicate). Then:
1. a storm: INTENTS fresh intents, each sent DUPLICATES times concurrently, alternating
   between the two versions (retried on 409 in progress / 503 until answered);
2. repeats of every intent through both versions (replays written by the other one);
3. the upstream's counts: an intent executed more than once is a double execution.
Exit status non-zero unless double executions and 5xx answers are both 0.

`--encrypted` gives both versions the same `store.encryption` key: records of every phase
are sealed (by the new release, in flight and unknown as well), and each version must
decide from the other's.
"""

import argparse
import base64
import collections
import concurrent.futures
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "bench"))
from postgres import Postgres  # noqa: E402

INTENTS = 200
DUPLICATES = 6


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} not ready after {timeout}s")


class Procs:
    def __init__(self, workdir):
        self.workdir, self.procs = workdir, []

    def start(self, name, argv, **kw):
        log = open(os.path.join(self.workdir, f"{name}.log"), "wb")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, **kw)
        self.procs.append(p)
        return p

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def post(url, timeout=15):
    req = urllib.request.Request(url, data=b'{"amount":100}', method="POST",
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)
    except (urllib.error.URLError, OSError) as e:
        return 0, str(e).encode(), {}


def answered(url, tally):
    """Send until answered: 409 request_in_progress and 503 are retried (documented)."""
    for _ in range(400):
        status, body, headers = post(url)
        tally[status] += 1
        code = ""
        if status >= 400:
            try:
                code = json.loads(body).get("code", "")
            except ValueError:
                pass
            tally[code or str(status)] += 1
        if status == 409 and code == "request_in_progress" or status == 503:
            time.sleep(0.05)
            continue
        return status, body, code
    return status, body, code


def storm(name, idems, upstream_url):
    tally = collections.Counter()
    first = {}

    def one(i, d):
        base = idems[(i + d) % 2]
        return i, answered(f"{base}/charges/ru-{name}-{i}", tally)

    with concurrent.futures.ThreadPoolExecutor(max_workers=32) as pool:
        jobs = [pool.submit(one, i, d) for i in range(INTENTS) for d in range(DUPLICATES)]
        for job in jobs:
            i, (status, body, _) = job.result()
            if 200 <= status < 300:
                first.setdefault(i, body)
        # Repeats through both versions: each replays what the other (or itself) wrote.
        repeats = [pool.submit(one, i, d) for i in range(INTENTS) for d in range(2)]
        mismatched = 0
        for job in repeats:
            i, (status, body, _) = job.result()
            if 200 <= status < 300 and i in first and body != first[i]:
                mismatched += 1
    doubles = once = 0
    for i in range(INTENTS):
        key = urllib.parse.quote(f"charge:ru-{name}-{i}", safe="")
        with urllib.request.urlopen(f"{upstream_url}/count?key={key}") as r:
            count = json.loads(r.read())["count"]
            doubles += count > 1
            once += count == 1
    fives = sum(n for s, n in tally.items() if isinstance(s, int) and s >= 500)
    return {"store": name, "intents": INTENTS, "requests": INTENTS * (DUPLICATES + 2),
            "double_executions": doubles, "executed_once": once, "replays_differing": mismatched,
            "5xx": fives, "unreadable": tally.get("record_unreadable", 0),
            "statuses": {str(k): v for k, v in sorted(tally.items(), key=str)}}


def config(upstream, store):
    return (f"upstream:\n  url: {upstream}\n  timeout: 10s\n{store}"
            "routes:\n  - name: charge\n    path: /charges/{id}\n    key: \"charge:{path.id}\"\n"
            "    lease: 5s\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--old-ref", default="old")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--encrypted", action="store_true",
                    help="both versions seal records with one store.encryption key")
    args = ap.parse_args()
    procs = Procs(args.workdir)
    results = []
    try:
        up_port = free_port()
        procs.start("upstream", [args.upstream, "--listen", f"127.0.0.1:{up_port}"])
        upstream = f"http://127.0.0.1:{up_port}"
        wait_http(f"{upstream}/count?key=x")
        redis_port = free_port()
        procs.start("redis", ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no"])
        pg = Postgres(args.workdir, free_port(), procs.start)
        stores = {
            "redis": f"store:\n  backend: redis\n  redis:\n    url: redis://127.0.0.1:{redis_port}/0\n",
            "postgres": f"store:\n  backend: postgres\n  postgres:\n    url: {pg.url()}\n",
        }
        if args.encrypted:
            key = os.path.join(args.workdir, "seal.key")
            with open(key, "w") as f:
                f.write(base64.b64encode(os.urandom(32)).decode())
            sealed = f"store:\n  encryption:\n    keys:\n      - {{id: roll, file: {key}}}\n"
            stores = {n: s.replace("store:\n", sealed, 1) for n, s in stores.items()}
        for name, store in stores.items():
            idems = []
            for version, binary in (("old", args.old), ("new", args.new)):
                port, admin = free_port(), free_port()
                path = os.path.join(args.workdir, f"{name}-{version}.yaml")
                with open(path, "w") as f:
                    f.write(f"listen: 127.0.0.1:{port}\nadmin:\n  listen: 127.0.0.1:{admin}\n")
                    f.write(config(upstream, store))
                if name == "postgres" and version == "old":
                    # The table as the old release leaves it: made by its `idem migrate`
                    # (releases before issue 34 record no schema version; the new serve
                    # must accept that table as it is, docs/postgres.md).
                    subprocess.run([binary, "migrate", "--config", path], check=True)
                if name == "postgres" and version == "new":
                    # The release's own step before its rollout (docs/postgres.md): its
                    # `idem migrate` adds what it needs while the old release serves on.
                    subprocess.run([binary, "migrate", "--config", path], check=True)
                procs.start(f"idem-{name}-{version}", [binary, "serve", "--config", path])
                wait_http(f"http://127.0.0.1:{admin}/readyz")
                idems.append(f"http://127.0.0.1:{port}")
            result = storm(name, idems, upstream)
            if args.encrypted:
                result["store"] = f"{name} (sealed)"
            results.append(result)
            print(json.dumps(result), flush=True)
    finally:
        procs.stop()
    print("\n| store | old release | intents | requests | executed once | double executions "
          "| 5xx | unreadable records | replays differing |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['store']} | {args.old_ref} | {r['intents']} | {r['requests']} | "
              f"{r['executed_once']} | {r['double_executions']} | {r['5xx']} | "
              f"{r['unreadable']} | {r['replays_differing']} |")
    # Every intent must have been executed exactly once (a count of 0 would mean the
    # check itself looked in the wrong place).
    bad = any(r["double_executions"] or r["5xx"] or r["replays_differing"]
              or r["executed_once"] != r["intents"] for r in results)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
