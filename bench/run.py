#!/usr/bin/env python3
"""idem benchmark orchestrator (called by bench/run.sh; standard library only).

Starts, on loopback and free ports: a private redis-server, a private PostgreSQL (for
the *_postgres scenarios, bench/postgres.py), the bench upstream (idem-bench-upstream),
idem (a fresh process per scenario), and nginx for the plain-proxy reference; drives
them with wrk; and writes bench/results/<date>.md (+ .json; a later run on the same day adds -2, -3…).

Every scenario runs `--rounds` times, interleaved (round 1 of every scenario, then
round 2, ...), so slow drift on a shared machine hits all scenarios alike; each row
reports the median round, and ratios are taken against `direct` of the same round.

Then the added-latency phase (bench/latency.py; `--latency 0` skips it): the latency idem
adds over direct at 50% and 90% of its saturation, with an open-loop generator.
"""

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import latency
import plot
from postgres import Postgres, bin_dir as pg_bin_dir

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WRK_DIR = os.path.join(HERE, "wrk")
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

BODY = '{"amount":100,"currency":"eur"}'


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port} after {timeout}s")


def http(method, url, body=None, timeout=5):
    req = urllib.request.Request(url, data=body, method=method)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read()


# --- /proc readings ---------------------------------------------------------------


def cpu_times(pids):
    """(utime, stime) of the processes (all their threads), summed, in clock ticks; a
    process that has gone counts nothing."""
    user = system = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            user, system = user + int(fields[11]), system + int(fields[12])
        except OSError:
            pass
    return user, system


def cpu_ticks(pids):
    """utime + stime of the processes (all their threads), in clock ticks."""
    return sum(cpu_times(pids))


def status_kib(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def machine_busy(seconds=1.0):
    """Share of all CPUs busy over `seconds` (before a round: what others are using)."""

    def read():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + v[4]
        return sum(v), idle

    t0, i0 = read()
    time.sleep(seconds)
    t1, i1 = read()
    return 1.0 - (i1 - i0) / max(1, t1 - t0)


# --- processes ----------------------------------------------------------------------


class Proc:
    def __init__(self, name, argv, workdir, env=None, cwd=None):
        self.name = name
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.log = open(self.log_path, "ab")
        self.p = subprocess.Popen(
            argv,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            cwd=cwd,
        )
        self.pid = self.p.pid

    def stop(self, sig=signal.SIGTERM, timeout=10):
        if self.p.poll() is None:
            self.p.send_signal(sig)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


class Redis:
    def __init__(self, workdir):
        self.port = free_port()
        d = os.path.join(workdir, "redis")
        os.makedirs(d, exist_ok=True)
        self.proc = Proc(
            "redis",
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--protected-mode", "no", "--dir", d],
            workdir,
        )
        wait_port(self.port)

    def cli(self, *args):
        return subprocess.run(
            ["redis-cli", "-p", str(self.port), *args],
            capture_output=True, text=True, check=True,
        ).stdout

    def commandstats(self):
        stats = {}
        for line in self.cli("INFO", "commandstats").splitlines():
            m = re.match(r"cmdstat_([^:]+):calls=(\d+)", line)
            if m:
                stats[m.group(1)] = int(m.group(2))
        return stats

    def url(self):
        return f"redis://127.0.0.1:{self.port}/0"


class Idem:
    def __init__(self, bins, workdir, upstream_port, store, redis=None, log_level="warn",
                 workers=0, postgres=None, env=None, store_extra=""):
        self.port, self.admin = free_port(), free_port()
        store_yaml = "store:\n  backend: memory\n"
        if store == "redis":
            store_yaml = f"store:\n  backend: redis\n  redis:\n    url: {redis.url()}\n"
        if store == "postgres":
            store_yaml = ("store:\n  backend: postgres\n  postgres:\n"
                          f"    url: {postgres.url()}\n")
        config = os.path.join(workdir, f"idem-{self.port}.yaml")
        with open(config, "w") as f:
            f.write(
                f"listen: 127.0.0.1:{self.port}\n"
                f"admin:\n  listen: 127.0.0.1:{self.admin}\n"
                f"upstream:\n  url: http://127.0.0.1:{upstream_port}\n  timeout: 10s\n"
                f"{store_yaml}{store_extra}"
                "routes:\n"
                "  - name: charge\n"
                "    methods: [POST]\n"
                "    path: /charges\n"
                "    key: \"{header.idempotency-key}\"\n"
            )
        env = {"RUST_LOG": log_level, **(env or {})}
        if store == "postgres":
            # Serving runs no DDL: `idem migrate` creates the table first, as an operator does.
            subprocess.run([bins["idem"], "migrate", "--config", config], check=True,
                           capture_output=True)
        argv = [bins["idem"], "serve", "--config", config]
        if workers:
            argv += ["--workers", str(workers)]
        self.proc = Proc("idem", argv, workdir, env=env)
        wait_port(self.port)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                if http("GET", f"http://127.0.0.1:{self.admin}/readyz")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.05)

    @property
    def pid(self):
        return self.proc.pid

    def metrics(self):
        return http("GET", f"http://127.0.0.1:{self.admin}/metrics")[1].decode()

    def stop(self):
        self.proc.stop()


class Nginx:
    def __init__(self, workdir, upstream_port):
        self.port = free_port()
        d = os.path.join(workdir, "nginx")
        os.makedirs(d, exist_ok=True)
        conf = os.path.join(d, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_CONF.format(dir=d, port=self.port, upstream=upstream_port,
                                      user="user root;" if os.geteuid() == 0 else ""))
        self.proc = Proc("nginx", ["nginx", "-p", d, "-c", conf, "-e", f"{d}/error.log"],
                         workdir)
        wait_port(self.port)

    @property
    def pids(self):
        return [self.proc.pid, *children(self.proc.pid)]

    def stop(self):
        self.proc.stop(signal.SIGQUIT)


NGINX_CONF = """\
{user}
worker_processes auto;
daemon off;
master_process on;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    upstream up {{
        server 127.0.0.1:{upstream};
        keepalive 256;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://up;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"""


# --- wrk ----------------------------------------------------------------------------


def wrk(args, workdir, port, script, path, seconds, connections=None, env=None):
    out = os.path.join(workdir, f"wrk-{time.time_ns()}.json")
    c = connections or args.connections
    threads = min(args.threads, c)
    argv = ["wrk", f"-t{threads}", f"-c{c}", f"-d{seconds}s", "--timeout", "10s",
            "-s", os.path.join(WRK_DIR, script), f"http://127.0.0.1:{port}{path}"]
    e = {**os.environ, "WRK_LUA_DIR": WRK_DIR, "WRK_OUT": out, "WRK_PATH": path,
         "STORM_GROUP": str(max(1, c // threads)), **(env or {})}
    subprocess.run(argv, env=e, capture_output=True, text=True,
                   timeout=seconds + 30, check=True)
    with open(out) as f:
        return json.load(f)


def loadtest(bins, argv, timeout=120):
    """`idem loadtest`: exit status and its report. Its progress lines (stderr, every
    few seconds) are left out, so that the report quoted in the results is the same
    however long the run took."""
    r = subprocess.run([bins["idem"], "loadtest", *argv], capture_output=True, text=True,
                       timeout=timeout)
    stderr = "".join(line for line in r.stderr.splitlines(keepends=True)
                     if not line.startswith("loadtest progress: "))
    return r.returncode, r.stdout + stderr


# --- scenarios ----------------------------------------------------------------------

SCENARIOS = [
    # name, label, target, store, script, path
    ("direct", "1. direct to the upstream (fixed-body POST)", "upstream", None, "fixed.lua", "/plain"),
    ("direct_keyed", "1b. direct to the upstream (unique keys)", "upstream", None, "unique.lua", "/charges"),
    ("passthrough", "2. idem passthrough (unmatched route)", "idem", "memory", "fixed.lua", "/plain"),
    ("fresh_memory", "3. idem fresh intents, memory store", "idem", "memory", "unique.lua", "/charges"),
    ("fresh_redis", "4. idem fresh intents, Redis", "idem", "redis", "unique.lua", "/charges"),
    ("replay_redis", "5. idem replays (100 completed keys), Redis", "idem", "redis", "replay.lua", "/charges"),
    ("storm_redis", "6. idem duplicate storm, Redis", "idem", "redis", "storm.lua", "/charges"),
    ("fresh_postgres", "8. idem fresh intents, PostgreSQL", "idem", "postgres", "unique.lua", "/charges"),
    ("replay_postgres", "9. idem replays (100 completed keys), PostgreSQL", "idem", "postgres", "replay.lua", "/charges"),
    ("storm_postgres", "10. idem duplicate storm, PostgreSQL", "idem", "postgres", "storm.lua", "/charges"),
    ("nginx_passthrough", "7a. nginx proxy_pass, fixed-body POST (as 2)", "nginx", None, "fixed.lua", "/plain"),
    ("nginx_keyed", "7b. nginx proxy_pass, unique keys (as 3, 4)", "nginx", None, "unique.lua", "/charges"),
    ("nginx_replay", "7c. nginx proxy_pass, 100 repeated keys (as 5)", "nginx", None, "replay.lua", "/charges"),
]

# Ratios: each scenario against the direct run with the same wrk script (the load
# generator's own cost differs between a fixed request and a Lua-built one).
BASELINE = {"fixed.lua": "direct", "unique.lua": "direct_keyed",
            "replay.lua": "direct_keyed", "storm.lua": "direct_keyed"}


def run_scenario(args, ctx, name, target, store, script, path, rnd):
    bins, workdir, upstream, redis = ctx["bins"], ctx["workdir"], ctx["upstream"], ctx["redis"]
    run_id = f"{name}{rnd}x{os.getpid()}"
    idem = None
    proxy_pids = []
    if target == "upstream":
        port = ctx["upstream_port"]
        proxy_pids = []
    elif target == "nginx":
        port = ctx["nginx"].port
        proxy_pids = ctx["nginx"].pids
    else:
        if store == "redis":
            redis.cli("FLUSHALL")
        if store == "postgres":
            ctx["postgres"].reset()
        idem = Idem(bins, workdir, ctx["upstream_port"], store, redis,
                    workers=args.idem_workers, postgres=ctx.get("postgres"),
                    store_extra=ctx.get("store_extra", ""))
        port = idem.port
        proxy_pids = [idem.pid]
    env = {"RUN": run_id}
    result = {"scenario": name, "round": rnd}
    # Every run starts from an empty upstream count map.
    http("POST", f"http://127.0.0.1:{ctx['upstream_port']}/reset")
    try:
        if script == "replay.lua":
            # Complete the replay keys first (through the proxy, same body and path).
            code, text = loadtest(bins, [
                "--target", f"http://127.0.0.1:{port}", "--run-id", run_id,
                "--intents", str(args.replay_keys), "--duplicates", "1",
                "--concurrency", "8", "--path-template", path, "--body", BODY,
                "--duration-limit", "20s"])
            if target == "idem" and code != 0:
                raise RuntimeError(f"replay warm-up failed:\n{text}")
        # Warm-up (connections, pools, allocator), not measured.
        wrk(args, workdir, port, script, path, args.warmup, env={"RUN": run_id + "w"})
        if script == "storm.lua":
            http("POST", f"http://127.0.0.1:{ctx['upstream_port']}/reset")
        stats0 = redis.commandstats() if store == "redis" else None
        pg = ctx.get("postgres") if store == "postgres" else None
        pg0 = (pg.statements(), pg.transactions()) if pg else None
        store_pids = pg.pids() if pg else [redis.proc.pid] if store == "redis" else []
        store0 = {p: cpu_ticks([p]) for p in store_pids}
        m0 = idem.metrics() if idem else ""
        ops0, outcomes0 = store_ops(m0), outcome_counts(m0)
        cpu0 = cpu_ticks(proxy_pids)
        w = wrk(args, workdir, port, script, path, args.duration, env=env)
        time.sleep(0.3)  # let the last completions land before reading counters
        cpu1 = cpu_ticks(proxy_pids)
        store_pids = pg.pids() if pg else store_pids
        store_ticks = sum(cpu_ticks([p]) - store0.get(p, 0) for p in store_pids)
        result.update(w)
        result["rps"] = w["requests"] / (w["duration_us"] / 1e6)
        result["cpu_us_per_req"] = (cpu1 - cpu0) / CLK_TCK * 1e6 / max(1, w["requests"])
        if idem:
            result["peak_rss_kib"] = status_kib(idem.pid, "VmHWM")
            outcomes1 = outcome_counts(idem.metrics())
            result["outcomes"] = {k: v - outcomes0.get(k, 0) for k, v in outcomes1.items()
                                  if v - outcomes0.get(k, 0) > 0}
        elif target == "nginx":
            result["peak_rss_kib"] = sum(status_kib(p, "VmHWM") for p in proxy_pids)
        if store in ("redis", "postgres"):
            result["store_cpu_us_per_req"] = (store_ticks / CLK_TCK * 1e6
                                              / max(1, w["requests"]))
        if pg0 is not None:
            stmts1, xacts1 = pg.statements(), pg.transactions()
            delta = {k: v - pg0[0].get(k, 0) for k, v in stmts1.items()}
            delta = {k: v for k, v in delta.items() if v > 0}
            ops1 = store_ops(idem.metrics())
            ops = {k: ops1.get(k, 0) - ops0.get(k, 0) for k in ops1}
            result["pg_statements"] = delta
            result["store_ops"] = {k: v for k, v in ops.items() if v > 0}
            # The psql readings themselves are transactions too (two per reading).
            result["pg_xacts"] = xacts1 - pg0[1] - 2
            handled = sum(result["outcomes"].values()) or w["requests"]
            result["handled"] = handled
            result["pg_sent"] = sum(delta.values())
            result["pg_per_req"] = result["pg_sent"] / max(1, handled)
        if stats0 is not None:
            stats1 = redis.commandstats()
            delta = {k: stats1.get(k, 0) - stats0.get(k, 0) for k in stats1}
            for k in ("ping", "info", "subscribe", "psubscribe", "hello", "client|setinfo",
                      "client|setname", "script|load"):
                delta.pop(k, None)
            delta = {k: v for k, v in delta.items() if v > 0}
            ops1 = store_ops(idem.metrics())
            ops = {k: ops1.get(k, 0) - ops0.get(k, 0) for k in ops1}
            ops = {k: v for k, v in ops.items() if v > 0}
            # commandstats also counts the commands a script runs inside Redis; take
            # them out to get what idem sent: every store operation is one script call
            # (EVALSHA), and only WAIT (`wait_replicas`) goes out on its own.
            scripted = any(c in SCRIPT_CALLS for c in delta)
            inner = sum(v for c, v in delta.items()
                        if scripted and c not in SCRIPT_CALLS and c not in SENT_ALONE)
            sent = sum(delta.values()) - inner
            result["redis_commands"] = delta
            result["store_ops"] = ops
            result["redis_inner"] = inner
            result["redis_sent"] = sent
            # Requests idem handled in the window (wrk does not count the last in-flight
            # ones, idem does).
            handled = sum(result["outcomes"].values()) or w["requests"]
            result["handled"] = handled
            result["redis_per_req"] = sent / max(1, handled)
        if script == "storm.lua":
            _, body = http("GET", f"http://127.0.0.1:{ctx['upstream_port']}/stats")
            result["upstream"] = json.loads(body)
    finally:
        if idem:
            idem.stop()
    return result


# The commands that run a script (the store's every operation on the request path), and
# the one command idem sends on its own beside them; anything else counted while scripts
# ran was called by a script.
SCRIPT_CALLS = ("eval", "evalsha", "fcall")
SENT_ALONE = ("wait",)


def store_ops(metrics):
    out = {}
    for line in metrics.splitlines():
        m = re.match(r'idem_store_duration_seconds_count\{op="(\w+)"\} (\d+)', line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def outcome_counts(metrics):
    out = {}
    for line in metrics.splitlines():
        m = re.match(r'idem_requests_total\{.*outcome="(\w+)".*\} (\d+)', line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0) + int(m.group(2))
    return out


def idle_rss(args, ctx):
    idem = Idem(ctx["bins"], ctx["workdir"], ctx["upstream_port"], "redis", ctx["redis"])
    try:
        time.sleep(1.0)
        return status_kib(idem.pid, "VmRSS")
    finally:
        idem.stop()


def soak(args, ctx):
    """256 connections of fresh intents on Redis; RSS sampled every 5 s."""
    ctx["redis"].cli("FLUSHALL")
    idem = Idem(ctx["bins"], ctx["workdir"], ctx["upstream_port"], "redis", ctx["redis"])
    samples = []
    stop = threading.Event()

    def sample():
        t0 = time.time()
        while not stop.wait(5.0):
            samples.append((round(time.time() - t0), status_kib(idem.pid, "VmRSS")))

    t = threading.Thread(target=sample)
    try:
        t.start()
        w = wrk(args, ctx["workdir"], idem.port, "unique.lua", "/charges", args.soak,
                connections=256, env={"RUN": f"soak{os.getpid()}"})
        stop.set()
        t.join()
        return {
            "requests": w["requests"],
            "rps": w["requests"] / (w["duration_us"] / 1e6),
            "p99_us": w["p99_us"],
            "errors": w["status_errors"] + w["read_errors"] + w["write_errors"]
            + w["connect_errors"] + w["timeouts"],
            "samples": samples,
            "peak_rss_kib": status_kib(idem.pid, "VmHWM"),
        }
    finally:
        stop.set()
        idem.stop()


def storm_check(args, ctx):
    """`idem loadtest` as the outside judge of a duplicate storm on Redis."""
    ctx["redis"].cli("FLUSHALL")
    idem = Idem(ctx["bins"], ctx["workdir"], ctx["upstream_port"], "redis", ctx["redis"])
    try:
        argv = ["--target", f"http://127.0.0.1:{idem.port}", "--intents", "2000",
                "--duplicates", "32", "--concurrency", "64", "--path-template", "/charges",
                "--body", BODY, "--duration-limit", "60s",
                "--check-url", f"http://127.0.0.1:{ctx['upstream_port']}/count?key={{key}}"]
        code, text = loadtest(ctx["bins"], argv)
        return {"exit": code, "output": text.strip(),
                "command": "idem loadtest " + " ".join(
                    a if re.match(r"^[\w:/.{}=?-]+$", a) else f"'{a}'" for a in argv)}
    finally:
        idem.stop()


# --- report -------------------------------------------------------------------------


def median_round(rows):
    """The round with the median throughput (its latencies stay consistent)."""
    rows = sorted(rows, key=lambda r: r["rps"])
    return rows[(len(rows) - 1) // 2]


def machine_info():
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = 0
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) // 1024

    def version(argv, pattern=None):
        try:
            out = subprocess.run(argv, capture_output=True, text=True).stdout
            out = out or ""
            if pattern:
                m = re.search(pattern, out)
                return m.group(0) if m else out.strip().splitlines()[0]
            return out.strip().splitlines()[0]
        except (OSError, IndexError):
            return "?"

    nginx = subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip()
    commit = version(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"])
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "src"],
                           capture_output=True, text=True).stdout.strip()
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_mib": mem,
        "kernel": platform.release(),
        "rustc": version(["rustc", "--version"]),
        "wrk": version(["wrk", "--version"], r"wrk [^\s]+"),
        "nginx": nginx.replace("nginx version: ", ""),
        "redis": version(["redis-server", "--version"], r"v=[\d.]+"),
        "postgres": version([os.path.join(pg_bin_dir() or "/nonexistent", "postgres"),
                             "--version"], r"(?<=\) )[\d.]+"),
        "commit": commit + (" (with uncommitted changes in src/)" if dirty else ""),
    }


def fmt_ms(us):
    return f"{us / 1000:.2f}"


def render(args, results, extras, info, started, command):
    by = {}
    for r in results:
        by.setdefault(r["scenario"], []).append(r)
    med = {k: median_round(v) for k, v in by.items()}
    rounds = {}
    for r in results:
        rounds.setdefault(r["round"], {})[r["scenario"]] = r

    def ratio(name):
        base = BASELINE[[s for s in SCENARIOS if s[0] == name][0][4]]
        vals = [rd[name]["rps"] / rd[base]["rps"] for rd in rounds.values()
                if name in rd and base in rd]
        return statistics.median(vals) if vals else float("nan"), vals

    lines = []
    add = lines.append
    add(f"# idem benchmark — {started:%Y-%m-%d %H:%M} UTC")
    add("")
    add(f"- Command: `{command}`, commit {info['commit']}")
    add(f"- Machine: {info['cpu']}, {info['cores']} cores, {info['memory_mib']} MiB, "
        f"Linux {info['kernel']} (shared with other work; everything on loopback)")
    add(f"- Tools: {info['rustc']}; {info['wrk']}; nginx {info['nginx']}; "
        f"redis-server {info['redis']}; PostgreSQL {info.get('postgres', '?')}")
    add(f"- Load: wrk -t{args.threads} -c{args.connections}, {args.duration} s per run "
        f"after a {args.warmup} s warm-up, {args.rounds} interleaved rounds; each row is "
        "the median round. Ratios are per round against direct with the same wrk script "
        "(1 for fixed-body rows, 1b for keyed rows), then the median.")
    add(f"- Other load on the machine before each round (CPU busy): "
        + ", ".join(f"{b * 100:.0f}%" for b in extras["busy"]))
    add("- idem: release build, `RUST_LOG=warn` (no per-request log line), route "
        "`POST /charges` keyed on `{header.idempotency-key}`, other paths passed "
        "through; a fresh idem process per run. Upstream: `idem-bench-upstream "
        "--threads 2`. nginx: `worker_processes auto`, upstream keepalive.")
    add("")
    add("| scenario | req/s | ratio | p50 ms | p99 ms | p99.9 ms | proxy CPU µs/req "
        "| peak RSS MiB | store round trips/req | store CPU µs/req | non-2xx |")
    add("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, label, target, store, script, path in SCENARIOS:
        if name not in med:
            continue
        r = med[name]
        rt, _ = ratio(name)
        cpu = f"{r['cpu_us_per_req']:.1f}" if target != "upstream" else "—"
        rss = f"{r['peak_rss_kib'] / 1024:.1f}" if "peak_rss_kib" in r else "—"
        per = r.get("redis_per_req", r.get("pg_per_req"))
        rcmd = f"{per:.3f}" if per is not None else "—"
        scpu = (f"{r['store_cpu_us_per_req']:.1f}" if "store_cpu_us_per_req" in r else "—")
        errs = r["status_errors"] + r["read_errors"] + r["write_errors"] + r["timeouts"]
        add(f"| {label} | {r['rps']:,.0f} | {rt:.2f} | {fmt_ms(r['p50_us'])} | "
            f"{fmt_ms(r['p99_us'])} | {fmt_ms(r['p999_us'])} | {cpu} | {rss} | {rcmd} | "
            f"{scpu} | {errs:,} |")
    add("")
    add("Redis commands per run (INFO commandstats delta, health PINGs excluded):")
    add("")
    for name in ("fresh_redis", "replay_redis", "storm_redis"):
        if name in med:
            r = med[name]
            cmds = ", ".join(f"{k} {v:,}" for k, v in sorted(r["redis_commands"].items()))
            ops = ", ".join(f"{k} {v:,}" for k, v in sorted(r["store_ops"].items()))
            add(f"- {name}: {r['requests']:,} requests; idem store operations: {ops}; "
                f"commandstats: {cmds}, of which {r['redis_inner']:,} run inside the "
                f"scripts → {r['redis_sent']:,} commands sent = "
                f"{r['redis_per_req']:.3f}/request")
    if "storm_redis" in med:
        s = med["storm_redis"]
        up = s["upstream"]
        o = s.get("outcomes", {})
        winners = o.get("forwarded", 0)
        losers = s.get("handled", s["requests"]) - winners
        per_loser = (s["redis_sent"] - 2 * winners) / max(1, losers)
        add(f"- storm: {up['keys']:,} intents executed {up['executions']:,} times upstream "
            f"(duplicated keys: {up['duplicated_keys']}, max per key {up['max_per_key']}); "
            f"idem outcomes {o}; Redis commands per duplicate (non-winner) "
            f"{per_loser:.3f}")
    if any(n in med for n in ("fresh_postgres", "replay_postgres", "storm_postgres")):
        add("")
        add("PostgreSQL statements per run (pg_stat_statements calls of idem's statements on "
            "its table; the background purge excluded), and transactions (pg_stat_database):")
        add("")
    for name in ("fresh_postgres", "replay_postgres", "storm_postgres"):
        if name in med:
            r = med[name]
            stmts = ", ".join(f"{k} {v:,}" for k, v in sorted(r["pg_statements"].items()))
            ops = ", ".join(f"{k} {v:,}" for k, v in sorted(r["store_ops"].items()))
            add(f"- {name}: {r['handled']:,} requests handled; idem store operations: {ops}; "
                f"statements: {stmts} = {r['pg_per_req']:.3f}/request; transactions "
                f"{r['pg_xacts']:,} = {r['pg_xacts'] / max(1, r['handled']):.3f}/request; "
                f"database CPU {r['store_cpu_us_per_req']:.1f} µs/request")
    if "storm_postgres" in med:
        s = med["storm_postgres"]
        up = s["upstream"]
        add(f"- storm on PostgreSQL: {up['keys']:,} intents executed {up['executions']:,} "
            f"times upstream (duplicated keys: {up['duplicated_keys']}, max per key "
            f"{up['max_per_key']}); idem outcomes {s.get('outcomes', {})}")
    add("")
    add("Targets:")
    add("")
    checks = targets(med, ratio, extras)
    for ok, text in checks:
        add(f"- [{'x' if ok else ' '}] {text}")
    add("")
    add("Memory:")
    add("")
    if "idle_rss_kib" in extras:
        add(f"- idle RSS (Redis store, after start): {extras['idle_rss_kib'] / 1024:.1f} MiB")
    if extras.get("soak"):
        s = extras["soak"]
        samp = ", ".join(f"{t}s {k / 1024:.1f}" for t, k in s["samples"])
        add(f"- 256 connections, fresh intents on Redis, {args.soak} s: {s['rps']:,.0f} "
            f"req/s, p99 {fmt_ms(s['p99_us'])} ms, errors {s['errors']}, peak RSS "
            f"{s['peak_rss_kib'] / 1024:.1f} MiB; RSS MiB over time: {samp}")
    if extras.get("storm_check"):
        c = extras["storm_check"]
        add("")
        add(f"Duplicate storm judged from outside (`{c['command']}`, exit {c['exit']}):")
        add("")
        add("```")
        add(c["output"])
        add("```")
    add("")
    add("Per round (req/s):")
    add("")
    add("| scenario | " + " | ".join(f"round {k}" for k in sorted(rounds)) + " |")
    add("|---|" + "---:|" * len(rounds))
    for name, label, *_ in SCENARIOS:
        if name in by:
            vals = {r["round"]: r["rps"] for r in by[name]}
            add(f"| {name} | " + " | ".join(f"{vals.get(k, 0):,.0f}" for k in sorted(rounds))
                + " |")
    return "\n".join(lines) + "\n", checks


def targets(med, ratio, extras):
    out = []

    def have(*names):
        return all(n in med for n in names)

    if have("passthrough", "nginx_passthrough", "direct"):
        p, n = ratio("passthrough")[0], ratio("nginx_passthrough")[0]
        out.append((p >= n, f"passthrough ≥ nginx: {p:.2f} vs {n:.2f} of direct"))
        added = (med["passthrough"]["p99_us"] - med["direct"]["p99_us"]) / 1000
        out.append((added <= 1.0, f"passthrough p99 added ≤ 1 ms: {added:+.2f} ms"))
    if have("fresh_redis"):
        f = ratio("fresh_redis")[0]
        out.append((f >= 0.30, f"fresh on Redis ≥ 0.30 of direct: {f:.2f}"))
        c = med["fresh_redis"]["redis_per_req"]
        out.append((abs(c - 2) < 0.002, f"exactly 2 Redis commands per fresh intent: {c:.3f}"))
    if have("replay_redis"):
        r = ratio("replay_redis")[0]
        out.append((r >= 0.55, f"replays on Redis ≥ 0.55 of direct: {r:.2f}"))
        c = med["replay_redis"]["redis_per_req"]
        out.append((c <= 1.001, f"≤ 1 Redis command per replay: {c:.3f}"))
    if have("storm_redis"):
        s = med["storm_redis"]
        up = s["upstream"]
        out.append((up["executions"] == up["keys"] and up["duplicated_keys"] == 0,
                    f"storm executions == intents: {up['executions']:,} == {up['keys']:,}"))
        winners = s.get("outcomes", {}).get("forwarded", 0)
        losers = s.get("handled", s["requests"]) - winners
        per_loser = (s["redis_sent"] - 2 * winners) / max(1, losers)
        # 0.001: a request or two are between their reservation and their answer
        # when the counters are read.
        out.append((per_loser <= 1.001,
                     f"storm duplicates cost no more Redis commands than a replay: "
                     f"{per_loser:.3f} per duplicate, {s['redis_per_req']:.3f} per request "
                     "(winners add their completion)"))
    if have("fresh_postgres"):
        c = med["fresh_postgres"]["pg_per_req"]
        # 0.01: pg_stat_statements counts a statement when the server finishes it, idem
        # its request when the answer is out; up to pool_size statements are between.
        out.append((abs(c - 2) < 0.01, f"2 statements per fresh intent on PostgreSQL: {c:.3f}"))
    if have("replay_postgres"):
        c = med["replay_postgres"]["pg_per_req"]
        out.append((c <= 1.001, f"≤ 1 statement per replay on PostgreSQL: {c:.3f}"))
    if have("storm_postgres"):
        up = med["storm_postgres"]["upstream"]
        out.append((up["executions"] == up["keys"] and up["duplicated_keys"] == 0,
                    f"storm on PostgreSQL executions == intents: "
                    f"{up['executions']:,} == {up['keys']:,}"))
    if "idle_rss_kib" in extras:
        mib = extras["idle_rss_kib"] / 1024
        out.append((mib <= 20, f"idle RSS ≤ 20 MiB: {mib:.1f} MiB"))
    if extras.get("soak"):
        s = extras["soak"]
        peak = s["peak_rss_kib"] / 1024
        out.append((peak <= 100, f"RSS under 256 connections ≤ 100 MiB: peak {peak:.1f} MiB"))
        samples = [k for _, k in s["samples"]]
        if len(samples) >= 4:
            half = samples[len(samples) // 2 - 1]
            growth = (samples[-1] - half) / 1024
            out.append((growth <= 2.0,
                        f"RSS not growing over {s['samples'][-1][0]} s: "
                        f"{growth:+.1f} MiB over the second half"))
    if extras.get("storm_check"):
        out.append((extras["storm_check"]["exit"] == 0,
                    "idem loadtest storm (2000 intents x 32 duplicates) passes"))
    return out


# --- main ---------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=int, default=8, help="seconds per measured run")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2, help="wrk threads")
    ap.add_argument("--upstream-threads", type=int, default=2)
    ap.add_argument("--idem-workers", type=int, default=0,
                    help="idem --workers (0: its default, server.workers: auto)")
    ap.add_argument("--soak", type=int, default=60, help="seconds at 256 connections (0: skip)")
    ap.add_argument("--replay-keys", type=int, default=100)
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "target", "release"))
    ap.add_argument("--command", default="bash bench/run.sh")
    latency.add_options(ap)
    args = ap.parse_args()

    for tool in ("wrk", "nginx", "redis-server", "redis-cli"):
        if not shutil.which(tool):
            sys.exit(f"{tool} not found (bench/run.sh installs it)")
    bins = {"idem": os.path.join(args.bin_dir, "idem"),
            "upstream": os.path.join(args.bin_dir, "idem-bench-upstream")}
    for b in bins.values():
        if not os.path.exists(b):
            sys.exit(f"{b} missing: cargo build --release --bins")
    if args.latency:
        bins["rate"] = latency.rate_bin(args.bin_dir, ROOT)

    started = dt.datetime.now(dt.timezone.utc)
    only = set(filter(None, args.only.split(",")))
    scenarios = [s for s in SCENARIOS if not only or s[0] in only]
    workdir = tempfile.mkdtemp(prefix="idem-bench-")
    log(f"work dir {workdir}")
    ctx = {"bins": bins, "workdir": workdir}
    procs = []
    results, extras = [], {"busy": []}
    try:
        ctx["redis"] = Redis(workdir)
        procs.append(ctx["redis"].proc)
        ctx["upstream_port"] = free_port()
        up = Proc("upstream", [bins["upstream"], "--listen",
                               f"127.0.0.1:{ctx['upstream_port']}",
                               "--threads", str(args.upstream_threads)], workdir)
        procs.append(up)
        wait_port(ctx["upstream_port"])
        ctx["upstream"] = up
        if any(s[3] == "postgres" for s in scenarios):
            ctx["postgres"] = Postgres(
                workdir, free_port(), lambda name, argv: Proc(name, argv, workdir))
            procs.append(ctx["postgres"].proc)
        if any(s[2] == "nginx" for s in scenarios):
            ctx["nginx"] = Nginx(workdir, ctx["upstream_port"])
            procs.append(ctx["nginx"].proc)

        for rnd in range(1, args.rounds + 1):
            busy = machine_busy()
            extras["busy"].append(busy)
            log(f"round {rnd}/{args.rounds} (machine busy before: {busy * 100:.0f}%)")
            for name, label, target, store, script, path in scenarios:
                r = run_scenario(args, ctx, name, target, store, script, path, rnd)
                results.append(r)
                log(f"  {name:18} {r['rps']:>9,.0f} req/s  p50 {fmt_ms(r['p50_us'])} ms  "
                    f"p99 {fmt_ms(r['p99_us'])} ms"
                    + (f"  redis/req {r['redis_per_req']:.3f}" if "redis_per_req" in r else "")
                    + (f"  pg stmts/req {r['pg_per_req']:.3f}" if "pg_per_req" in r else "")
                    + (f"  store cpu {r['store_cpu_us_per_req']:.1f} µs/req"
                       if "store_cpu_us_per_req" in r else "")
                    + f"  cpu {r['cpu_us_per_req']:.1f} µs/req")
        if args.latency and (not only or any(s[0] in only for s in latency.SCENARIOS)):
            log("latency phase: open loop at "
                + ", ".join(f"{float(x) * 100:.0f}%" for x in args.latency_loads.split(","))
                + " of saturation, direct and idem")
            extras["latency"] = latency.phase(args, ctx, results, sys.modules[__name__])
        if not only:
            extras["idle_rss_kib"] = idle_rss(args, ctx)
            log(f"idle RSS {extras['idle_rss_kib'] / 1024:.1f} MiB")
            log("storm check with idem loadtest")
            extras["storm_check"] = storm_check(args, ctx)
            log(f"  exit {extras['storm_check']['exit']}")
            if args.soak > 0:
                log(f"soak: 256 connections for {args.soak} s")
                extras["soak"] = soak(args, ctx)
                log(f"  peak RSS {extras['soak']['peak_rss_kib'] / 1024:.1f} MiB")
    finally:
        for p in reversed(procs):
            p.stop(signal.SIGQUIT if p.name == "nginx" else signal.SIGTERM)

    info = machine_info()
    text, checks = render(args, results, extras, info, started, args.command)
    os.makedirs(args.out, exist_ok=True)
    stamp = started.strftime("%Y-%m-%d")
    suffix = "" if not only else "-partial"
    # A second run on the same day gets its own files (-2, -3…) instead of replacing
    # the first's, which the docs may already cite.
    base, n = suffix, 1
    while os.path.exists(os.path.join(args.out, f"{stamp}{suffix}.md")):
        n += 1
        suffix = f"{base}-{n}"
    data = {"machine": info, "results": results, "extras": extras, "args": vars(args)}
    with open(os.path.join(args.out, f"{stamp}{suffix}.json"), "w") as f:
        json.dump(data, f, indent=1, default=str)
    # The chart beside the markdown, which shows it (bench/plot.py draws it again
    # from the JSON).
    svg = plot.write(json.loads(json.dumps(data, default=str)),
                     os.path.join(args.out, f"{stamp}{suffix}.svg"))
    text += f"\n![req/s, CPU per request and latency]({os.path.basename(svg)})\n"
    if extras.get("latency"):
        lsvg = None
        if extras["latency"].get("points"):
            lsvg = plot.write_latency(json.loads(json.dumps(data, default=str)),
                                      os.path.join(args.out, f"{stamp}{suffix}-latency.svg"))
        text += latency.markdown(extras["latency"], lsvg and os.path.basename(lsvg))
    md = os.path.join(args.out, f"{stamp}{suffix}.md")
    with open(md, "w") as f:
        f.write(text)
    print()
    print(text)
    log(f"wrote {md}")
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
