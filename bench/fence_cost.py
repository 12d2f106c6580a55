#!/usr/bin/env python3
"""What a fenced completion costs Redis, next to the commands it could not replace.

    python3 bench/fence_cost.py [--records 20000] [--record-bytes 600] [--rounds 2]

Starts its own redis-server on a free loopback port, fills it with reservations, and
sends each variant for every key, pipelined 500 at a time, reading Redis's own
`usec_per_call` from `INFO commandstats` (command time only, no I/O):

- `reserve`: idem's reservation, `SET k <record> NX GET PX <lease>`, on new keys;
- `complete`: idem's fenced completion, `EVALSHA` of the `replace_if_owner` script as
  src/store/redis/scripts.rs builds it (GET, compare the token, SET … PX);
- `script call`: an `EVALSHA` with the same arguments that only returns 1 — what
  running any script costs;
- `unfenced SET`: a plain `SET k <record> PX <retention>`, which would overwrite a
  reservation another proxy has taken over (SPEC §1 step 6 forbids it): the reference
  for what fencing costs.

Redis 7.0 has no conditional SET on a value (Redis 8.4 and Valkey 8.1 have `IFEQ`), so
the check and the write must run in a script; docs/benchmarks.md quotes the result.
"""
import argparse
import os
import re
import socket
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402

TOKEN = "0123456789abcdef0123456789abcdef"
BATCH = 500


def replace_if_owner_source():
    """The Lua text of the fenced completion as idem sends it (`fenced` in
    src/store/redis/scripts.rs): the helpers, one read of the record, the token guard
    (the `replace_if_owner` row of crates/idem-fence), then the write."""
    path = os.path.join(run.ROOT, "src", "store", "redis", "scripts.rs")
    with open(path) as f:
        text = f.read()

    def const(name):
        """A `const NAME: &str = r"…";`, or a fenced write's `Body { lua: r"…", … }`."""
        m = re.search(r'const %s: (?:&str = |Body = Body \{\s*lua: )r(#?)"(.*?)"\1[;,]' % name,
                      text, re.S)
        if not m:
            sys.exit(f"{name} not found in {path}")
        return m.group(2)

    owner = re.search(r'Condition::Owner => \{\s*r"(.*?)"', text, re.S)
    if not owner:
        sys.exit(f"the Owner guard not found in {path}")
    read = "local current = redis.call('GET', KEYS[1])\n"
    return const("FIELD") + const("CLOCK") + const("INDEX") + read + owner.group(1) + const("REPLACE")


def encode(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def pipeline(sock, commands):
    """Send the commands and read one reply each (every reply here is one line, or a
    bulk string whose length line says how much follows)."""
    sock.sendall(b"".join(commands))
    buf, replies = b"", 0
    while replies < len(commands):
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise RuntimeError("redis closed the connection")
        buf += chunk
        while True:
            end = buf.find(b"\r\n")
            if end < 0:
                break
            line, rest = buf[:end], buf[end + 2:]
            if line.startswith(b"-"):
                raise RuntimeError(line.decode())
            if line.startswith(b"$") and int(line[1:]) >= 0:
                size = int(line[1:])
                if len(rest) < size + 2:
                    break
                rest = rest[size + 2:]
            buf, replies = rest, replies + 1


def usec_per_call(redis, command):
    for line in redis.cli("INFO", "commandstats").splitlines():
        if line.startswith(f"cmdstat_{command}:"):
            return float(re.search(r"usec_per_call=([\d.]+)", line).group(1))
    return float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--record-bytes", type=int, default=600,
                    help="size of a completed record (the bench's is ~600 bytes)")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="idem-fence-") as workdir:
        redis = run.Redis(workdir)
        try:
            measure(redis, args)
        finally:
            redis.proc.stop()


def measure(redis, args):
    sock = socket.create_connection(("127.0.0.1", redis.port))
    complete = redis.cli("SCRIPT", "LOAD", replace_if_owner_source()).strip()
    noop = redis.cli("SCRIPT", "LOAD", "return 1").strip()
    # idem's record layout (src/store/codec.rs): state byte, token hex, newline, JSON.
    reservation = (f"P{TOKEN}\n" + "{").encode().ljust(299, b" ") + b"}"
    record = (f"C{TOKEN}\n" + "{").encode().ljust(args.record_bytes - 1, b" ") + b"}"
    keys = [f"bench:{i}" for i in range(args.records)]
    variants = [
        ("reserve", "set", lambda k: encode("SET", k, reservation, "NX", "GET", "PX", 60000)),
        ("complete", "evalsha",
         lambda k: encode("EVALSHA", complete, 1, k, TOKEN, record, 86400000, "", "", "", "0", "")),
        ("script call", "evalsha",
         lambda k: encode("EVALSHA", noop, 1, k, TOKEN, record, 86400000, "", "", "", "0", "")),
        ("unfenced SET", "set", lambda k: encode("SET", k, record, "PX", 86400000)),
    ]
    print(f"{args.records} keys, {args.record_bytes}-byte records; µs of Redis command "
          "time per call (INFO commandstats)")
    for rnd in range(1, args.rounds + 1):
        results = []
        for name, command, make in variants:
            redis.cli("FLUSHALL")
            if name != "reserve":
                for i in range(0, len(keys), BATCH):
                    pipeline(sock, [variants[0][2](k) for k in keys[i:i + BATCH]])
            redis.cli("CONFIG", "RESETSTAT")
            for i in range(0, len(keys), BATCH):
                pipeline(sock, [make(k) for k in keys[i:i + BATCH]])
            if name == "complete" and not redis.cli("GET", keys[-1]).startswith("C"):
                sys.exit("the fenced completion did not write: record layout changed?")
            results.append(f"{name} {usec_per_call(redis, command):.2f}")
        print(f"round {rnd}: " + ", ".join(results))


if __name__ == "__main__":
    main()
