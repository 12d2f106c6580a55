"""The nemesis' tool API: it does NOT deduplicate, and it counts every execution itself.

Every POST is one execution of the intent named by its `Idempotency-Key` header (idem
passes the key on): it is counted at once (the side effect happens when the request
arrives), then answered after a latency drawn from (seed, key, execution number) —
mostly quick, sometimes 0.5–4 s, so calls are in flight when faults hit. While the
scheduler has an upstream fault window open, an execution instead:
- `stall`: answers only after idem's `upstream.timeout` has passed (idem: 504, held);
- `reset`: resets the connection (RST) without answering, after a short delay.
Either way the execution counted: the effect happened, its answer was lost.

Each execution's answer body is unique (`{"key", "execution", "id"}`), so two callers
holding different 2xx bodies for one intent proves two executions reached callers.
The run is judged from `Upstream.executions` (and the callers' answers), never from
idem's metrics. Runs in a thread of the driver; standard library only.
"""

import hashlib
import json
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def draw(seed, *parts):
    """A number in [0, 1) from the seed and `parts`: the same for every replay."""
    h = hashlib.sha256(repr((seed,) + parts).encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64


class Execution:
    __slots__ = ("key", "n", "replica", "caller", "start", "end", "how", "body")

    def __init__(self, key, n, replica, caller, start):
        self.key, self.n, self.replica, self.caller = key, n, replica, caller
        self.start, self.end, self.how, self.body = start, None, "running", None


class Upstream:
    def __init__(self, seed, clock, stall_for):
        self.seed, self.clock, self.stall_for = seed, clock, stall_for
        self.lock = threading.Lock()
        self.executions = {}      # key -> [Execution]
        self.mode = None          # None | "stall" | "reset", set by the scheduler
        self.seq = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def stop(self):
        self.server.shutdown()

    def latency(self, key, n):
        r = draw(self.seed, "latency", key, n)
        if r < 0.55:
            return 0.02 + r * 0.3                  # 20–190 ms
        if r < 0.85:
            return 0.5 + (r - 0.55) / 0.30 * 1.5   # 0.5–2 s
        return 2.0 + (r - 0.85) / 0.15 * 2.0       # 2–4 s

    def execute(self, key, replica, caller):
        with self.lock:
            runs = self.executions.setdefault(key, [])
            e = Execution(key, len(runs) + 1, replica, caller, self.clock())
            runs.append(e)
            self.seq += 1
            e.body = json.dumps({"key": key, "execution": e.n,
                                 "id": f"ex_{self.seq:06d}"}).encode()
            return e, self.mode

    def _handler(self):
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                self.reply(200, b'{"ok":true}')

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                key = self.headers.get("idempotency-key")
                if key is None:
                    return self.reply(400, b'{"error":"no idempotency-key"}')
                e, mode = upstream.execute(key, self.headers.get("x-nemesis-replica", "?"),
                                           self.headers.get("x-nemesis-caller", "?"))
                if mode == "reset":
                    time.sleep(draw(upstream.seed, "reset", key, e.n) * 0.8)
                    e.how, e.end = "reset", upstream.clock()
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                               struct.pack("ii", 1, 0))
                    self.connection.close()
                    self.close_connection = True
                    return
                stalled = mode == "stall"
                time.sleep(upstream.stall_for if stalled else upstream.latency(key, e.n))
                e.how, e.end = ("stalled" if stalled else "answered"), upstream.clock()
                try:
                    self.reply(201, e.body)
                except OSError:
                    e.how = "stalled" if stalled else "unread"   # idem gave up on it

            def reply(self, status, body):
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.send_header("connection", "close")
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()
                self.close_connection = True

            def finish(self):
                try:
                    super().finish()
                except OSError:
                    pass

        return Handler
