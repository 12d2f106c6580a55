#!/usr/bin/env python3
"""Redis's own CPU for a reservation, by the way it is sent: the reservation script of
src/store/redis/scripts.rs (CLOCK + FIELD + INDEX + RESERVE, read from the source) as
`EVALSHA`, the same script as a Redis `FUNCTION` called with `FCALL`, and the plain
`SET k v NX GET PX` a floor would send (no lease on the server's clock, no open index).
For fresh keys and for a replayed (completed) key, from `INFO commandstats` (`usec` per
call of the top-level command, which includes what a script calls).

    python3 bench/redis_clock_cost.py [--requests 200000]

Starts its own redis-server on a free loopback port and drives it with
`redis-benchmark -c 4`. Timings of a native process: compare the rows of one run.
"""
import argparse
import os
import re
import socket
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = open(os.path.join(ROOT, "src/store/redis/scripts.rs")).read()


def const(name):
    return re.search(r"const " + name + r': &str = r#?"(.*?)"#?;', SOURCE, re.S).group(1)


REPLAYED = const("REPLAYED")
RESERVE = REPLAYED + const("FIELD") + const("CLOCK") + const("INDEX") + const("RESERVE")
META = ('\n{"route":"charge","scope":"","key":"charge:inv_1","fingerprint":"' + "0" * 64
        + '","credentials":"' + "0" * 64 + '","attempt":1,"created_at_ms":1,'
        '"expires_at_ms":1764000000000,"status":null,"headers":[],"body_stored":false,'
        '"sent_at_ms":1764000000000}\n')
IN_PROGRESS = "P" + "a" * 32 + META
COMPLETED = ("C" + "a" * 32 + META.replace('"status":null', '"status":201')
             .replace("false", "true") + '{"id":"ch_1","amount":100}')
# A store key's shape (prefix, 64 hex digits): the script derives the open index's name
# from it.
KEY = "idem:" + "0" * 52 + "__rand_int__"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=200000)
    args = ap.parse_args()
    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no"],
                              stdout=subprocess.DEVNULL)

    def cli(*a):
        return subprocess.run(["redis-cli", "-p", str(port), *a], capture_output=True,
                              text=True).stdout.strip()

    try:
        for _ in range(50):
            if cli("PING") == "PONG":
                break
            time.sleep(0.1)
        sha = cli("SCRIPT", "LOAD", RESERVE)
        body = RESERVE.replace("KEYS[", "keys[").replace("ARGV[", "args[")
        library = ("#!lua name=idem_bench\nredis.register_function('reserve', "
                   "function(keys, args)\n" + body + "\nend)")
        cli("FUNCTION", "LOAD", "REPLACE", library)

        def run(label, command, top):
            cli("FLUSHALL")
            cli("CONFIG", "RESETSTAT")
            subprocess.run(["redis-benchmark", "-p", str(port), "-n", str(args.requests),
                            "-c", "4", "-r", "100000000", *command], capture_output=True)
            stats = cli("INFO", "commandstats")
            m = re.search(r"cmdstat_" + top + r":calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)",
                          stats)
            print(f"| {label} | {float(m.group(3)):.2f} |" if m else f"| {label} | — |")

        print("| reservation, sent as | Redis µs per call |")
        print("|---|---:|")
        ttl, lease = "86400000", "10000"
        run("fresh key: `EVALSHA` (idem)", ["EVALSHA", sha, "1", KEY, IN_PROGRESS, ttl, lease],
            "evalsha")
        run("fresh key: `FCALL`", ["FCALL", "reserve", "1", KEY, IN_PROGRESS, ttl, lease],
            "fcall")
        run("fresh key: `SET NX GET PX` (floor)",
            ["SET", KEY, IN_PROGRESS, "NX", "GET", "PX", ttl], "set")
        replayed = "idem:" + "0" * 64
        for label, command, top in (
                ("replayed key: `EVALSHA` (idem)",
                 ["EVALSHA", sha, "1", replayed, IN_PROGRESS, ttl, lease], "evalsha"),
                ("replayed key: `FCALL`",
                 ["FCALL", "reserve", "1", replayed, IN_PROGRESS, ttl, lease], "fcall"),
                ("replayed key: `GET` (floor)", ["GET", replayed], "get")):
            cli("FLUSHALL")
            cli("SET", replayed, COMPLETED)
            cli("CONFIG", "RESETSTAT")
            subprocess.run(["redis-benchmark", "-p", str(port), "-n", str(args.requests),
                            "-c", "4", *command], capture_output=True)
            stats = cli("INFO", "commandstats")
            m = re.search(r"cmdstat_" + top + r":calls=\d+,usec=\d+,usec_per_call=([\d.]+)",
                          stats)
            print(f"| {label} | {float(m.group(1)):.2f} |" if m else f"| {label} | — |")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
