#!/usr/bin/env python3
"""idem's memory under h2c clients that ask for large answers and never read them.

    python3 -m venv /tmp/h2 && /tmp/h2/bin/pip install h2    # the `h2` package (PyPI)
    /tmp/h2/bin/python bench/h2_slow_reader.py [--bin-dir target/release]
                       [--connections 10] [--streams 100] [--answer-bytes 1048576]

Runs the release idem (memory store, a catch-all protected route, `default:
passthrough`) in front of idem-bench-upstream; opens `--connections` h2c connections,
each with `--streams` POSTs (protected, each its own key) for answers of
`--answer-bytes`, reads the
frames so TCP is not the limit but never acknowledges them (the client's flow-control
window stays at its initial 64 KiB), and prints idem's RSS before and 4 s after. hyper
sends an answer only as the peer's window opens; what idem holds meanwhile is its copy
for the record, which `server.max_buffered_bytes` bounds (a copy past it is dropped and
the intent answers `response_not_stored`), and hyper's send buffer per stream.
"""
import argparse
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chart_memory import start_behind_idem  # noqa: E402
from run import status_kib  # noqa: E402

try:
    import h2.config
    import h2.connection
except ImportError:
    sys.exit("needs the `h2` package: python3 -m venv /tmp/h2 && /tmp/h2/bin/pip install h2")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default="target/release")
    ap.add_argument("--connections", type=int, default=10)
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--answer-bytes", type=int, default=1 << 20)
    args = ap.parse_args()
    upstream, idem, port = start_behind_idem(args.bin_dir)
    try:
        mib = lambda field: status_kib(idem.pid, field) / 1024  # noqa: E731
        print(f"started: RSS {mib('VmRSS'):.1f} MiB", flush=True)
        clients = []
        for c in range(args.connections):
            s = socket.create_connection(("127.0.0.1", port))
            h = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
            h.initiate_connection()
            for i in range(args.streams):
                h.send_headers(h.get_next_available_stream_id(), [
                    (":method", "POST"), (":path", f"/big/{c}/{i}"), (":scheme", "http"),
                    (":authority", "idem"), ("idempotency-key", f"slow-{c}-{i}"),
                    ("x-bench-body-bytes", str(args.answer_bytes))],
                    end_stream=True)
            s.sendall(h.data_to_send())
            s.settimeout(0.01)
            clients.append((s, h))
        received = 0
        deadline = time.time() + 4.0
        while time.time() < deadline:
            for s, h in clients:
                try:
                    data = s.recv(1 << 20)
                except (socket.timeout, BlockingIOError):
                    continue
                received += len(data)
                h.receive_data(data)  # never acknowledged: the window stays shut
                out = h.data_to_send()
                if out:
                    s.sendall(out)
        print(f"{args.connections} connections x {args.streams} streams x "
              f"{args.answer_bytes} B answers, unread ({received / 1024:.0f} KiB reached the "
              f"client): RSS {mib('VmRSS'):.1f} MiB, peak {mib('VmHWM'):.1f} MiB", flush=True)
        for s, _ in clients:
            s.close()
    finally:
        for p in (idem, upstream):
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    main()
