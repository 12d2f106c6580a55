#!/usr/bin/env python3
"""A toy payments API for the README's quick start: it charges on EVERY call, like most
tool APIs nobody made idempotent. Listens on 127.0.0.1:3000 (or the port given).
`GET /count?key=K` answers how many charges carried the idempotency key K, which is what
`idem loadtest --check-url` asks."""
import collections
import itertools
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

charges = itertools.count(1)
per_key = collections.Counter()
per_key_lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        n = next(charges)
        key = self.headers.get("idempotency-key")
        with per_key_lock:
            per_key[key] += 1
        body = json.dumps({
            "charge_id": f"ch_{n:04}",
            "path": self.path,
            "idempotency_key": self.headers.get("idempotency-key"),
        }).encode()
        print(f"charge #{n} executed for {self.path}", file=sys.stderr, flush=True)
        self.send_response(201)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        url = urlparse(self.path)
        if url.path != "/count":
            self.send_error(404)
            return
        key = parse_qs(url.query).get("key", [None])[0]
        with per_key_lock:
            body = json.dumps({"count": per_key[key]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send_response(self, code, message=None):
        # Only the headers set below: no `Server` and `Date`, so the README's quick
        # start shows exactly what this answers (tests/readme/readme_examples.rs compares it).
        self.send_response_only(code, message)

    def log_message(self, *args):
        pass


class Server(ThreadingHTTPServer):
    # The standard library's listen backlog of 5 refuses connections under a load test.
    request_queue_size = 1024
    daemon_threads = True


port = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
Server(("127.0.0.1", port), Handler).serve_forever()
