"""The nemesis' tool API, which counts every execution itself. On `/retry/…` it
deduplicates the `Idempotency-Key` for DEDUP_WINDOW seconds after the key's first
execution, like a provider that keeps keys (so the `retry` route, whose
`upstream_key_window` is shorter, is checked exactly: one effect per intent); on every
other path it does NOT deduplicate.

Every POST that is not such a repeat is one execution of the intent named by its
`Idempotency-Key` header (idem passes the key on): it is counted at once (the side
effect happens when the request arrives), then answered after a latency drawn from
(seed, key, execution number) —
mostly quick, sometimes 0.5–4 s, so calls are in flight when faults hit. While the
scheduler has an upstream fault window open, an execution instead:
- `stall`: answers only after idem's `upstream.timeout` has passed (idem: 504, held);
- `reset`: resets the connection (RST) without answering, after a short delay.
Either way the execution counted: the effect happened, its answer was lost.

A repeat inside the window executes nothing: it is counted in `hits` and answered with
the first execution's body (under the same faults as an execution).

`GET /search?key=K` is the `reconcile` route's lookup: it lists K's executions that
have COMPLETED (answered, or reset, or past their stall), as `{"data": [body]}`, and
`{"data": []}` while an execution is still running or has not arrived — a search that
sees a call only once it is done. Each lookup is recorded (`lookups`) with the caller
whose repeat asked it, so the checker can tell a re-execution that followed a lookup
blind to the earlier call.

POSTs under `/probe` are the scheduler's checks that a stall or reset took effect;
they are kept apart (`probes`) and never judged.

Each execution's answer body is unique (`{"key", "execution", "id"}`), so two callers
holding different 2xx bodies for one intent proves two executions reached callers.
The run is judged from `Upstream.executions` (and the callers' answers), never from
idem's metrics. Runs in a thread of the driver; standard library only.
"""

import hashlib
import http.client
import json
import urllib.parse
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


class Lookup:
    __slots__ = ("at", "key", "caller", "found")

    def __init__(self, at, key, caller, found):
        self.at, self.key, self.caller, self.found = at, key, caller, found


DEDUP_PREFIX = "/retry/"


class Upstream:
    def __init__(self, seed, clock, stall_for, dedup_window):
        self.seed, self.clock, self.stall_for = seed, clock, stall_for
        self.dedup_window = dedup_window
        self.lock = threading.Lock()
        self.executions = {}      # key -> [Execution]
        self.hits = {}            # key -> [run clock] repeats answered from the first
        self.lookups = {}         # key -> [Lookup]
        self.probes = {}          # key -> [Execution] the scheduler's probes
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

    def execute(self, key, replica, caller, path):
        """The execution this POST is, or (for a repeat in the window) the one it repeats
        and True."""
        with self.lock:
            book = self.probes if path.startswith("/probe") else self.executions
            runs = book.setdefault(key, [])
            now = self.clock()
            if path.startswith(DEDUP_PREFIX) and runs \
                    and now - runs[0].start < self.dedup_window:
                self.hits.setdefault(key, []).append(now)
                return runs[0], self.mode, True
            e = Execution(key, len(runs) + 1, replica, caller, now)
            runs.append(e)
            self.seq += 1
            e.body = json.dumps({"key": key, "execution": e.n,
                                 "id": f"ex_{self.seq:06d}"}).encode()
            return e, self.mode, False

    def search(self, key, caller):
        with self.lock:
            now = self.clock()
            done = [e for e in self.executions.get(key, []) if e.end is not None]
            self.lookups.setdefault(key, []).append(
                Lookup(now, key, caller, done[0].n if done else None))
            return done[0].body if done else None

    def check_mode(self, mode, n):
        """Raise unless a POST now is stalled (no answer within 1 s) or reset, as `mode`
        says: the scheduler's check that the fault took effect."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1.0 if mode == "stall" else 3.0)
        try:
            conn.request("POST", "/probe", b"{}", {"idempotency-key": f"nemesis-probe:{n:.2f}",
                                                   "content-type": "application/json"})
            status = conn.getresponse().status
        except socket.timeout:
            if mode == "stall":
                return
            raise RuntimeError("upstream reset: the probe got no answer, but no reset either")
        except (OSError, http.client.HTTPException) as e:
            if mode == "reset":
                return
            raise RuntimeError(f"upstream stall: the probe failed with {e!r}")
        finally:
            conn.close()
        raise RuntimeError(f"upstream {mode}: the probe was answered {status}")

    def _handler(self):
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                if url.path != "/search":
                    return self.reply(200, b'{"ok":true}')
                key = urllib.parse.parse_qs(url.query).get("key", [""])[0]
                body = upstream.search(key, self.headers.get("x-nemesis-caller", "?"))
                try:
                    self.reply(200, b'{"data": [' + (body or b"") + b"]}")
                except OSError:
                    pass   # idem's lookup gave up (its timeout, a dropped link)

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                key = self.headers.get("idempotency-key")
                if key is None:
                    return self.reply(400, b'{"error":"no idempotency-key"}')
                e, mode, hit = upstream.execute(key, self.headers.get("x-nemesis-replica", "?"),
                                                self.headers.get("x-nemesis-caller", "?"),
                                                self.path)
                if hit:
                    return self.repeat(e, mode)
                if mode == "reset":
                    time.sleep(draw(upstream.seed, "reset", key, e.n) * 0.8)
                    e.how, e.end = "reset", upstream.clock()
                    return self.reset()
                stalled = mode == "stall"
                # A probe is answered at once unless stalled, so a stall is told apart
                # from a slow execution.
                probe = self.path.startswith("/probe")
                time.sleep(upstream.stall_for if stalled else 0.0 if probe
                           else upstream.latency(key, e.n))
                e.how, e.end = ("stalled" if stalled else "answered"), upstream.clock()
                try:
                    self.reply(201, e.body)
                except OSError:
                    e.how = "stalled" if stalled else "unread"   # idem gave up on it

            def repeat(self, e, mode):
                """A deduplicated repeat: the first execution's answer, once it has one."""
                while e.end is None and mode != "reset":
                    time.sleep(0.05)
                if mode == "reset":
                    time.sleep(0.1)
                    return self.reset()
                time.sleep(upstream.stall_for if mode == "stall" else 0.02)
                try:
                    self.reply(201, e.body)
                except OSError:
                    pass

            def reset(self):
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
                self.connection.close()
                self.close_connection = True

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
