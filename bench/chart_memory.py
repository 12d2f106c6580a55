#!/usr/bin/env python3
"""The chart's memory limit against what idem holds at the chart's defaults.

    python3 bench/chart_memory.py [--bin-dir target/release] [--intents 6000]
                                  [--answer-bytes 10240] [--connections 1000]

Runs the release idem with the memory bounds of helm/idem/values.yaml
(`max_connections: 1024`, `max_buffered_bytes: 32MiB`, `store.memory.max_records: 20000`,
`store.memory.max_bytes: 40MiB`) in front of idem-bench-upstream, and reads idem's RSS
(`VmRSS`, and the peak `VmHWM`) after each load:

1. started, no traffic;
2. `--intents` fresh intents whose answers are `--answer-bytes` each (by default 6000 ×
   10 KiB = 60 MiB of answers, past `max_bytes`: the store must evict, not grow);
3. `--connections` open keep-alive connections, each after one request;
4. `--stalled-bodies` requests that each declare a `--body-bytes` body, send all of it
   but its last byte, and stall (issue 46's attack: 150 × 1 MiB took a build without
   `server.max_buffered_bytes` from 15 to 175 MB); read within `body_read_timeout` (10 s),
   and how many were answered early (503 `overloaded`, past the budget).

`--no-max-bytes` runs a build from before `store.memory.max_bytes` (its records bounded
by count alone).

Prints one line per step; the chart's limit is 192Mi (docs/kubernetes.md quotes the run).
"""
import argparse
import concurrent.futures
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import free_port, status_kib, wait_port  # noqa: E402


def request(port, path, headers, keep=None):
    """One HTTP/1.1 POST; returns the status. `keep`: a list to keep the socket open in."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    head = f"POST {path} HTTP/1.1\r\nhost: idem\r\ncontent-length: 2\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    s.sendall((head + "\r\n{}").encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    status = int(data.split(b" ", 2)[1]) if data else 0
    length = 0
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    body = data.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in data else b""
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    if keep is None:
        s.close()
    else:
        keep.append(s)
    return status


def stall(port, i, size):
    """A protected request whose body stops one byte short; the socket stays open."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    head = (f"POST /charge HTTP/1.1\r\nhost: idem\r\nidempotency-key: stall-{i}\r\n"
            f"content-length: {size}\r\n\r\n")
    try:
        s.sendall(head.encode() + b"x" * (size - 1))
    except OSError:
        pass  # answered and closed before the body was in: counted by answered()
    return s


def answered(s):
    """The status idem already answered on a stalled request, or 0 for none yet."""
    s.settimeout(0.2)
    try:
        data = s.recv(4096)
    except OSError:
        return 0
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0


def start_behind_idem(bin_dir, server="", memory=""):
    """idem-bench-upstream and idem in front of it (memory store, one catch-all route
    keyed by `Idempotency-Key`, `default: passthrough`), both listening; `server` and
    `memory`: YAML lines under `server:` and `store.memory:`. Returns (upstream, idem,
    idem's port)."""
    up_port, port, admin = free_port(), free_port(), free_port()
    upstream = subprocess.Popen(
        [os.path.join(bin_dir, "idem-bench-upstream"), "--listen", f"127.0.0.1:{up_port}"],
        stdout=subprocess.DEVNULL)
    config = os.path.join(tempfile.mkdtemp(prefix="idem-bench-memory-"), "idem.yaml")
    with open(config, "w") as f:
        f.write(f"""listen: 127.0.0.1:{port}
admin:
  listen: 127.0.0.1:{admin}
server:
{server or "  {}"}
upstream:
  url: http://127.0.0.1:{up_port}
  timeout: 30s
store:
  backend: memory
  memory:
{memory or "    {}"}
default: passthrough
routes:
  - name: idempotency_key_header
    methods: [POST, PUT, PATCH, DELETE]
    path: "/{{path*}}"
    key: "{{header.idempotency-key}}"
    require_key: false
""")
    idem = subprocess.Popen([os.path.join(bin_dir, "idem"), "serve", "--config", config],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(up_port, 20.0)
    wait_port(port, 20.0)
    time.sleep(0.5)
    return upstream, idem, port


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default="target/release")
    ap.add_argument("--intents", type=int, default=6000)
    ap.add_argument("--answer-bytes", type=int, default=10240)
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--stalled-bodies", type=int, default=150)
    ap.add_argument("--body-bytes", type=int, default=1 << 20)
    ap.add_argument("--no-max-bytes", action="store_true",
                    help="leave store.memory.max_bytes out (a build before it existed)")
    args = ap.parse_args()
    max_bytes = "" if args.no_max_bytes else "    max_bytes: 40MiB\n"
    server = "  max_connections: 1024\n  max_buffered_bytes: 32MiB\n  body_read_timeout: 10s\n"
    memory = "    max_records: 20000\n" + max_bytes
    upstream, idem, port = start_behind_idem(args.bin_dir, server, memory)
    try:

        def show(step):
            rss, peak = status_kib(idem.pid, "VmRSS"), status_kib(idem.pid, "VmHWM")
            print(f"{step:<58} RSS {rss / 1024:6.1f} MiB   peak {peak / 1024:6.1f} MiB", flush=True)

        show("started")
        pad = {"x-bench-body-bytes": str(args.answer_bytes)}

        def fresh(i):
            return request(port, "/charge", {"idempotency-key": f"intent-{i}", **pad})

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            statuses = list(pool.map(fresh, range(args.intents)))
        bad = sum(1 for s in statuses if s != 201)
        show(f"{args.intents} intents x {args.answer_bytes} B answers ({bad} not 201)")
        kept = []
        for i in range(args.connections):
            request(port, "/charge", {"idempotency-key": f"conn-{i}"}, keep=kept)
        show(f"{len(kept)} open keep-alive connections too")
        for s in kept:
            s.close()
        stalled = [stall(port, i, args.body_bytes) for i in range(args.stalled_bodies)]
        time.sleep(2.0)
        early = sum(1 for s in stalled if answered(s) == 503)
        show(f"{len(stalled)} stalled {args.body_bytes} B bodies ({early} answered 503)")
        for s in stalled:
            s.close()
    finally:
        idem.terminate()
        upstream.terminate()
        idem.wait(10)
        upstream.wait(10)


if __name__ == "__main__":
    main()
