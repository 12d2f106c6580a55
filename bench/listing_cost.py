#!/usr/bin/env python3
"""What listing unknown outcomes costs when the store is large (issue 33 §3).

    python3 bench/listing_cost.py [--bin-dir target/release] [--completed 1000000]
                                  [--unknown 100] [--stores redis,postgres] [--runs 5]

For each store, a private instance (redis-server, or initdb + postgres as in
bench/run.py) and one idem (release binary from --bin-dir) in front of a local upstream:
- `--unknown` intents whose upstream never answers (idem's timeout 300 ms, lease
  300 ms): unknown outcomes, written by idem itself;
- one completed intent, whose record is then copied under `--completed` fresh keys on
  the server (a Lua loop on Redis, `INSERT … SELECT generate_series` on PostgreSQL), so
  the store holds a million completed records without a million requests.
Then `GET /v1/unknown?limit=1000` `--runs` times: the median time, and what the store
did for one call (Redis: `INFO commandstats` calls by command, scripts' inner commands
included; PostgreSQL: pg_stat_statements calls and rows). The same read is what one
refresh of `idem_unknown_outcomes` costs (every 30 s, per replica): the listing recounts
from its own read when that read holds every record in progress.

Run it with two builds (--bin-dir) to compare before and after.
"""

import argparse
import http.server
import json
import os
import socketserver
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402
from postgres import Postgres  # noqa: E402

CLONE = """
local value = redis.call('GET', KEYS[1])
local base = ARGV[1]
for i = tonumber(ARGV[2]), tonumber(ARGV[3]) do
  local h = redis.sha1hex('c' .. i) .. redis.sha1hex('d' .. i)
  redis.call('SET', base .. string.sub(h, 1, 64), value, 'PX', 86400000)
end
return 1
"""


class Upstream(http.server.BaseHTTPRequestHandler):
    """201 at once; with `x-hang`, no answer for 5 s (idem gives up after 300 ms)."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.headers.get("x-hang"):
            time.sleep(5)
        body = b'{"id":"ch_1"}'
        self.send_response(201)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        try:
            self.end_headers()
            self.wfile.write(body)
        except BrokenPipeError:
            pass  # idem gave up waiting (the unknown outcomes)

    def log_message(self, *args):
        pass


def start_upstream():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Upstream)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


def start_idem(args, workdir, upstream, store_yaml):
    port, admin = run.free_port(), run.free_port()
    config = os.path.join(workdir, f"idem-{port}.yaml")
    with open(config, "w") as f:
        f.write(f"listen: 127.0.0.1:{port}\nadmin:\n  listen: 127.0.0.1:{admin}\n"
                f"upstream:\n  url: http://127.0.0.1:{upstream}\n  timeout: 300ms\n"
                f"{store_yaml}routes:\n  - name: charge\n    path: /charges/{{id}}\n"
                "    key: \"charge:{path.id}\"\n    lease: 300ms\n    on_unknown: hold\n")
    if "backend: postgres" in store_yaml:
        # `serve` runs no DDL: the schema is `idem migrate`'s.
        subprocess.run([os.path.join(args.bin_dir, "idem"), "migrate", "--config", config],
                       check=True, capture_output=True)
    proc = run.Proc("idem", [os.path.join(args.bin_dir, "idem"), "serve", "--config", config],
                    workdir, env={"RUST_LOG": "warn"})
    run.wait_port(port)
    return proc, port, admin


def make_intents(port, unknown):
    base = f"http://127.0.0.1:{port}/charges/"
    status, _ = run.http("POST", base + "done", b"{}")
    assert status == 201, status
    threads = []
    for n in range(unknown):
        def hang(n=n):
            req = urllib.request.Request(
                base + f"u{n}", data=b"{}", method="POST", headers={"x-hang": "1"})
            try:
                urllib.request.urlopen(req, timeout=5)
            except Exception:
                pass  # 504 upstream_timeout: the outcome is unknown
        t = threading.Thread(target=hang)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    time.sleep(1.0)  # every lease has ended


def measure(args, admin, counters):
    url = f"http://127.0.0.1:{admin}/v1/unknown?limit=1000"
    times, listed = [], None
    for n in range(args.runs):
        before = counters()
        started = time.perf_counter()
        status, body = run.http("GET", url, timeout=120)
        took = time.perf_counter() - started
        after = counters()
        assert status == 200, (status, body[:200])
        times.append(took)
        listed = json.loads(body)
        if n == 0:
            spent = {k: after.get(k, 0) - before.get(k, 0) for k in after}
            spent = {k: v for k, v in spent.items() if v}
    return statistics.median(times), len(listed["unknown"]), spent


def redis_case(args, workdir, upstream):
    redis = run.Redis(workdir)
    idem, port, admin = start_idem(
        args, workdir, upstream, f"store:\n  backend: redis\n  redis:\n    url: {redis.url()}\n")
    make_intents(port, args.unknown)
    names = redis.cli("--scan", "--pattern", "idem:*").split()
    done = [n for n in names if len(n) == len("idem:") + 64
            and redis.cli("GETRANGE", n, "0", "0").strip() == "C"]
    assert len(done) == 1, names
    step = 50_000
    for start in range(1, args.completed + 1, step):
        end = min(start + step - 1, args.completed)
        redis.cli("EVAL", CLONE, "1", done[0], "idem:", str(start), str(end))
    keys = int(redis.cli("DBSIZE"))

    def counters():
        stats = redis.commandstats()
        stats.pop("info", None)  # this script's own INFO commandstats
        stats["(all)"] = sum(stats.values())
        return stats

    took, listed, spent = measure(args, admin, counters)
    idem.stop()
    redis.proc.stop()
    return {"store": "redis", "keys": keys, "median_s": took, "listed": listed,
            "commands": spent}


def postgres_case(args, workdir, upstream):
    pg = Postgres(workdir, run.free_port(), lambda name, argv: run.Proc(name, argv, workdir))
    idem, port, admin = start_idem(
        args, workdir, upstream, f"store:\n  backend: postgres\n  postgres:\n    url: {pg.url()}\n")
    make_intents(port, args.unknown)
    columns = pg.sql("SELECT string_agg(column_name, ',' ORDER BY ordinal_position) FROM "
                     "information_schema.columns WHERE table_name = 'idem_records'").split(",")
    chosen = ",".join("decode(md5('c' || i) || md5('d' || i), 'hex')" if c == "key"
                      else f"r.{c}" for c in columns)
    pg.sql(f"INSERT INTO idem_records ({','.join(columns)}) SELECT {chosen} FROM "
           f"generate_series(1, {args.completed}) i, (SELECT * FROM idem_records WHERE "
           "state = 'completed' LIMIT 1) r")
    pg.sql("ANALYZE idem_records")
    rows = int(pg.sql("SELECT count(*) FROM idem_records"))

    def counters():
        out = {}
        for line in pg.sql("SELECT calls, rows, regexp_replace(query, '\\s+', ' ', 'g') "
                           "FROM pg_stat_statements WHERE "
                           "query LIKE '%idem_records%' OR query LIKE '%pg_class%'").splitlines():
            calls, nrows, query = line.split("|", 2)
            name = " ".join(query.split())[:70]
            out[name + " (calls)"] = int(calls)
            out[name + " (rows)"] = int(nrows)
        return out

    took, listed, spent = measure(args, admin, counters)
    idem.stop()
    pg.proc.stop()
    return {"store": "postgres", "keys": rows, "median_s": took, "listed": listed,
            "commands": spent}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin-dir", default=os.path.join(run.ROOT, "target", "release"))
    ap.add_argument("--completed", type=int, default=1_000_000)
    ap.add_argument("--unknown", type=int, default=100)
    ap.add_argument("--stores", default="redis,postgres")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    upstream = start_upstream()
    results = []
    with tempfile.TemporaryDirectory(prefix="idem-listing-") as workdir:
        for store in args.stores.split(","):
            case = {"redis": redis_case, "postgres": postgres_case}[store]
            results.append(case(args, workdir, upstream))
    for r in results:
        print(f"{r['store']}: {r['keys']} records, {r['listed']} unknown listed; "
              f"GET /v1/unknown median {r['median_s'] * 1000:.1f} ms")
        for name, n in sorted(r["commands"].items()):
            print(f"    {name}: {n}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
