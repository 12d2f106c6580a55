#!/usr/bin/env python3
"""A toy payments API for the README's quick start: it charges on EVERY call, like most
tool APIs nobody made idempotent. Listens on 127.0.0.1:3000 (or the port given)."""
import itertools
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

charges = itertools.count(1)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        n = next(charges)
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

    def log_message(self, *args):
        pass


port = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
