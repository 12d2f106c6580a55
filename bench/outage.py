#!/usr/bin/env python3
"""An upstream outage, end to end (issue 33): what it leaves behind and how it is cleared.

    python3 bench/outage.py [--bin-dir target/release] [--intents 101000]
                            [--concurrency 32] [--no-breaker]

1. An upstream that reads every request, then resets the connection (SO_LINGER 0).
2. `idem loadtest --intents N` through idem on the default memory store, one route,
   with `breaker: {after: 5, cool_down: 10s}` (unless --no-breaker): what each intent
   got, how many reached the upstream, how many unknown outcomes are left.
3. The upstream recovers; after the cool-down, N fresh intents (another run id) go
   through, without a restart.
4. The unknown outcomes are settled in one call (`idem keys resolve --all-unknown
   --not-executed`, a dry run first), and the outage's intents are sent again: each
   executes once.
"""

import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402


class ResettingUpstream:
    """Resets after reading each request until `recovered`, then answers 201."""

    def __init__(self):
        self.recovered = False
        self.reset, self.answered = 0, 0
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1024)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            conn, _ = self.sock.accept()
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn):
        try:
            data = b""
            while True:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, _, data = data.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                while len(data) < length:
                    data += conn.recv(65536)
                data = data[length:]
                if not self.recovered:
                    with self.lock:
                        self.reset += 1
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                with self.lock:
                    self.answered += 1
                conn.sendall(b"HTTP/1.1 201 Created\r\ncontent-type: application/json\r\n"
                             b"content-length: 2\r\n\r\n{}")
        except OSError:
            pass
        finally:
            conn.close()


def loadtest(args, port, run_id):
    out = subprocess.run(
        [os.path.join(args.bin_dir, "idem"), "loadtest", "--target", f"http://127.0.0.1:{port}",
         "--intents", str(args.intents), "--concurrency", str(args.concurrency),
         "--duration-limit", "600s", "--progress-interval", "0", "--run-id", run_id, "--json"],
        capture_output=True, text=True, timeout=900)
    return json.loads(out.stdout)


def metrics(admin):
    # A listing recounts the store's gauges (otherwise refreshed every 30 s).
    run.http("GET", f"http://127.0.0.1:{admin}/v1/unknown")
    text = run.http("GET", f"http://127.0.0.1:{admin}/metrics")[1].decode()
    wanted = ("idem_requests_total", "idem_breaker", "idem_unknown_outcomes{",
              "idem_store_records")
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith(wanted) and not line.endswith(" 0")}


def keys(args, admin, *extra):
    out = subprocess.run([os.path.join(args.bin_dir, "idem"), "keys", "resolve", "--admin",
                          f"http://127.0.0.1:{admin}", "--route", "charge", "--all-unknown",
                          "--not-executed", *extra], capture_output=True, text=True)
    return out.stdout.strip() or out.stderr.strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin-dir", default=os.path.join(run.ROOT, "target", "release"))
    ap.add_argument("--intents", type=int, default=101_000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--no-breaker", action="store_true")
    args = ap.parse_args()
    upstream = ResettingUpstream()
    port, admin = run.free_port(), run.free_port()
    breaker = "" if args.no_breaker else "    breaker: {after: 5, cool_down: 10s}\n"
    with tempfile.TemporaryDirectory(prefix="idem-outage-") as workdir:
        config = os.path.join(workdir, "idem.yaml")
        with open(config, "w") as f:
            f.write(f"listen: 127.0.0.1:{port}\nadmin:\n  listen: 127.0.0.1:{admin}\n"
                    f"upstream:\n  url: http://127.0.0.1:{upstream.port}\n  timeout: 2s\n"
                    "store:\n  backend: memory\nroutes:\n  - name: charge\n    methods: [POST]\n"
                    "    path: /loadtest/charge\n    key: \"{header.idempotency-key}\"\n"
                    f"{breaker}")
        idem = run.Proc("idem", [os.path.join(args.bin_dir, "idem"), "serve", "--config", config],
                        workdir, env={"RUST_LOG": "error"})
        run.wait_port(port)
        started = time.time()
        outage = loadtest(args, port, "outage")
        print(f"outage: {args.intents} intents in {time.time() - started:.1f} s; "
              f"errors {outage['errors_by_kind']}; "
              f"reached the upstream {upstream.reset}")
        time.sleep(31)  # every held lease (30 s) has ended: the unknown outcomes are final
        print("after the outage:", json.dumps(metrics(admin)))
        upstream.recovered = True
        time.sleep(10.5)  # the breaker's cool-down
        fresh = loadtest(args, port, "fresh")
        print(f"recovered, no restart: {fresh.get('forwarded')} of {args.intents} fresh intents "
              f"forwarded, errors {fresh['errors_by_kind']}")
        print("bulk resolution, dry run:", keys(args, admin, "--dry-run"))
        print("bulk resolution:", keys(args, admin))
        before = upstream.answered
        again = loadtest(args, port, "outage")
        print(f"the outage's intents sent again: forwarded {again.get('forwarded')}, "
              f"errors {again['errors_by_kind']}, executed {upstream.answered - before}")
        print("at the end:", json.dumps(metrics(admin)))
        idem.stop()


if __name__ == "__main__":
    main()
