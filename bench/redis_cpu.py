#!/usr/bin/env python3
"""Redis's CPU per intent: idem's against the plain commands a proxy without server-side
leases would send (issue 48).

    python3 bench/redis_cpu.py [--intents 3000] [--runs 3] [--bin-dir target/release]
                               [--before DIR]

Starts its own redis-server (`--save "" --appendonly no`, a free loopback port), the
bench upstream and idem (one worker, Redis store) in front of it, then, in each of
`--runs` rounds, one after another and each request waiting for its answer:

- idem, fresh: `--intents` POSTs with new keys (reservation and completion);
- idem, replay: as many POSTs repeating keys completed before;
- plain, fresh: `SET k rec NX GET PX ttl` then `SET k rec2 PX ttl`, one command per round
  trip, `rec`/`rec2` the very bytes idem stored for one of its intents (in progress and
  completed: same size);
- plain, replay: `GET k` of such a record.

Each is read from `INFO cpu` (used_cpu_user + used_cpu_sys: Redis's whole process,
sockets included) and `INFO commandstats` (`usec`, the commands' own time: a script's
includes what it calls) before and after, per intent. Redis's idle CPU over the same
wall time (its cron, idem's health checks, measured first) is subtracted. The table
gives the median of the rounds and idem's ratio to the plain commands. With
`--before DIR`, the idem binary in DIR (an earlier build) is measured too, in the same
rounds, interleaved. Timings of a native process: compare rows of one run.
"""
import argparse
import http.client
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402
from callgrind_redis import snapshot, used  # noqa: E402

BODY = b'{"amount":100,"currency":"eur"}'
# What a script may call: with scripts, only the scripts are round trips.
SCRIPTS = ("eval", "evalsha", "fcall")


class CountedRedis(run.Redis):
    """A redis-server under `valgrind --tool=callgrind` (`--instructions`): its user-space
    instructions between two `instructions()` calls, the same on a busy machine as on a
    quiet one (sockets' kernel time is not counted)."""

    def __init__(self, workdir):
        self.port = run.free_port()
        self.out = os.path.join(workdir, "callgrind")
        os.makedirs(self.out, exist_ok=True)
        self.proc = run.Proc("redis", [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={self.out}/cg.%p",
            "redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--protected-mode", "no", "--dir", self.out], workdir)
        run.wait_port(self.port, timeout=60)

    def instructions(self):
        """Instructions since the previous call (a callgrind dump zeroes the counters)."""
        before = set(os.listdir(self.out))
        subprocess.run(["callgrind_control", "-d", str(self.proc.pid)], capture_output=True,
                       check=True)
        for _ in range(200):
            new = set(os.listdir(self.out)) - before
            if new:
                break
            time.sleep(0.05)
        path = os.path.join(self.out, new.pop())
        for _ in range(100):
            text = open(path).read()
            m = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
            if m:
                return int(m.group(1))
            time.sleep(0.05)
        raise RuntimeError(f"no totals in {path}")


class Plain:
    """A client that sends one command per round trip and reads its reply (RESP2)."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.file = self.sock.makefile("rb")

    def call(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))
        return self.reply()

    def reply(self):
        line = self.file.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.file.read(n + 2)[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        if kind == b"-":
            raise RuntimeError(rest.decode())
        return rest


class Driver:
    """POSTs to one idem over a keep-alive connection."""

    def __init__(self, idem):
        self.conn = http.client.HTTPConnection("127.0.0.1", idem.port, timeout=10)

    def post(self, key):
        self.conn.request("POST", "/charges", BODY, {
            "Content-Type": "application/json", "Idempotency-Key": key})
        r = self.conn.getresponse()
        r.read()
        if r.status >= 300:
            raise RuntimeError(f"idem answered {r.status} for {key}")


def measure(redis, idle_rate, work, n):
    """Redis's cost of `work()` per unit of `n`: (cpu µs, commandstats µs, round trips,
    {command: calls per unit}, instructions or 0)."""
    before, started = snapshot(redis), time.monotonic()
    counted = isinstance(redis, CountedRedis)
    if counted:
        redis.instructions()
    work()
    instructions = redis.instructions() / n if counted else 0
    after, elapsed = snapshot(redis), time.monotonic() - started
    stats, cpu_s = used(before, after)
    cpu = (cpu_s - idle_rate * elapsed) * 1e6 / n
    stats.pop("info", None)
    calls = {cmd: c / n for cmd, (c, _) in stats.items()}
    usec = {cmd: u / n for cmd, (_, u) in stats.items()}
    top = [c for c in calls if c in SCRIPTS] or list(calls)
    return cpu, sum(usec[c] for c in top), sum(calls[c] for c in top), calls, instructions


def idle(redis, seconds=2.0):
    """Redis's CPU seconds per wall second with nothing sent (cron, health checks)."""
    before = snapshot(redis)
    time.sleep(seconds)
    return used(before, snapshot(redis))[1] / seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--intents", type=int, default=3000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bin-dir", default=os.path.join(run.ROOT, "target", "release"))
    ap.add_argument("--before", metavar="DIR", help="an earlier build's idem, measured too")
    ap.add_argument("--instructions", action="store_true",
                    help="run Redis under callgrind and count its instructions too (slow; "
                         "its CPU and commandstats then mean little)")
    args = ap.parse_args()
    bins = {b: os.path.join(args.bin_dir, b) for b in ("idem", "idem-bench-upstream")}
    idems = {"idem": bins["idem"]}
    if args.before:
        idems = {"before": os.path.join(args.before, "idem"), "after": bins["idem"]}
    for path in [*bins.values(), *idems.values()]:
        if not os.path.exists(path):
            sys.exit(f"{path} missing: cargo build --release")
    workdir = tempfile.mkdtemp(prefix="idem-redis-cpu-")
    redis = CountedRedis(workdir) if args.instructions else run.Redis(workdir)
    upstream_port = run.free_port()
    up = run.Proc("upstream", [bins["idem-bench-upstream"], "--listen",
                               f"127.0.0.1:{upstream_port}", "--threads", "1"], workdir)
    procs = {}
    try:
        run.wait_port(upstream_port)
        rows = {}
        n = args.intents
        plain = Plain(redis.port)
        for rnd in range(args.runs):
            for label, binary in idems.items():
                # Under callgrind Redis is some 50 times slower: a longer bound per call.
                slow = "    op_timeout: 5s\n" if args.instructions else ""
                idem = run.Idem({"idem": binary}, workdir, upstream_port, "redis", redis,
                                workers=1, store_extra=slow)
                procs[label] = idem
                try:
                    drive = Driver(idem)
                    tag = f"{label}-{rnd}-{time.time_ns()}"
                    # Warm up (connections, scripts cached), and the keys replayed below.
                    done = [f"r-{tag}-{i}" for i in range(100)]
                    for key in done:
                        drive.post(key)
                    rate = idle(redis)
                    fresh = measure(redis, rate, lambda: [
                        drive.post(f"f-{tag}-{i}") for i in range(n)], n)
                    replay = measure(redis, rate, lambda: [
                        drive.post(done[i % len(done)]) for i in range(n)], n)
                finally:
                    idem.stop()
                    procs.pop(label)
                rows.setdefault((label, "fresh"), []).append(fresh)
                rows.setdefault((label, "replay"), []).append(replay)
            # The plain commands, on records of idem's own bytes.
            names = redis.cli("KEYS", "*").split()
            sample = next(k for k in names if not k.endswith("open") and "events" not in k)
            completed = plain.call("GET", sample)
            in_progress = b"P" + completed[1:]
            ttl = 86_400_000
            tag = f"plain-{rnd}-{time.time_ns()}"

            def fresh_plain():
                for i in range(n):
                    key = f"{tag}-{i}"
                    plain.call("SET", key, in_progress, "NX", "GET", "PX", ttl)
                    plain.call("SET", key, completed, "PX", ttl)

            rate = idle(redis, 1.0)
            rows.setdefault(("plain", "fresh"), []).append(measure(redis, rate, fresh_plain, n))
            rows.setdefault(("plain", "replay"), []).append(measure(
                redis, rate, lambda: [plain.call("GET", sample) for _ in range(n)], n))
            print(f"round {rnd + 1}: record {len(completed)} bytes", file=sys.stderr)
        report(rows, idems, n, args.runs, len(completed), args.instructions)
    finally:
        for p in procs.values():
            p.stop()
        up.stop()
        redis.proc.stop()


def report(rows, idems, n, runs, record_bytes, counted):
    med = {k: [statistics.median(r[i] for r in v) for i in (0, 1, 2, 4)]
           for k, v in rows.items()}
    if counted:
        print(f"Redis's instructions per intent (callgrind), median of {runs} rounds of {n}:")
        print()
        print("| who | path | Redis instructions | × plain |")
        print("|---|---|---:|---:|")
        for who in [*idems, "plain"]:
            for path in ("fresh", "replay"):
                ins, base = med[(who, path)][3], med[("plain", path)][3]
                print(f"| {who} | {path} | {ins:,.0f} | {ins / base:.2f} |")
        return
    print(f"Redis per intent, median of {runs} rounds of {n} (record {record_bytes} bytes):")
    print()
    print("| who | path | Redis CPU µs | × plain | commandstats µs | × plain "
          "| round trips | commands per intent (last round) |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for who in [*idems, "plain"]:
        for path in ("fresh", "replay"):
            cpu, usec, trips, _ = med[(who, path)]
            base_cpu, base_usec, _, _ = med[("plain", path)]
            calls = rows[(who, path)][-1][3]
            text = ", ".join(f"{c} {v:.2f}" for c, v in sorted(calls.items(),
                                                                key=lambda kv: -kv[1]))
            print(f"| {who} | {path} | {cpu:.1f} | {cpu / base_cpu:.2f} | {usec:.2f} "
                  f"| {usec / base_usec:.1f} | {trips:.2f} | {text} |")
    print()
    print("Rounds (cpu µs, commandstats µs) per who/path:")
    for (who, path), v in sorted(rows.items()):
        print(f"- {who} {path}: " + "; ".join(f"{r[0]:.1f}, {r[1]:.2f}" for r in v))


if __name__ == "__main__":
    main()
