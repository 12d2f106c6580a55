"""The network between each idem replica and what it talks to: one small TCP proxy per
link (replica → upstream, replica → each store server), so the schedule can delay one
replica's traffic or cut it off without touching the others.

A link is `open` (bytes pass at once), `delay` (every chunk read in either direction is
passed on DELAY seconds after it was read, in order: a request already written reaches
the far end late, which is what SPEC §1 leaves outside idem's reach when it outlasts a
lease) or `drop` (every connection through it is reset, RST, and new ones are reset on
accept). Each fault is verified through the link itself (`probe`): a delay must hold a
probe's answer back, a drop must reset the probe.

The proxies run in a process of their own (`python3 links.py --serve`, one asyncio
loop, driven by JSON lines on its stdin): in the driver they shared the interpreter
lock with a thousand caller threads and, under a retry storm, held idem's store
commands past its `op_timeout` by themselves (PostgreSQL, seed 2: a minute of 503s
after a store freeze). Standard library only.
"""

import asyncio
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time

MAX_DELAY = 3.0   # the longest delay the schedule draws; the operator waits past it


class Links:
    """Every proxy of the run, served by a child process."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.lock = threading.Lock()
        self.all = []
        self.by_target, self.probes = {}, {}

    def call(self, **request):
        with self.lock:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            answer = json.loads(self.proc.stdout.readline() or '{"error": "links exited"}')
        if "error" in answer:
            raise RuntimeError(f"links: {answer['error']}")
        return answer

    def add(self, target, links, probe):
        """`target` (`r0/upstream`, `r0/store`) names `links`; `probe()` picks the one to
        check a fault through (the store's current server)."""
        self.by_target[target], self.probes[target] = links, probe

    def __getitem__(self, target):
        return self.by_target[target]

    def probe_link(self, target):
        return self.probes[target]()

    def open_all(self):
        for link in self.all:
            link.set("open")

    def link(self, name, target_port, probe):
        """A proxy to 127.0.0.1:`target_port`; `probe` = (request bytes, answer prefix)."""
        port = self.call(op="link", name=name, target=target_port)["port"]
        link = Link(self, name, port, probe)
        self.all.append(link)
        return link

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Link:
    """The driver's handle on one proxy: set its mode, check it through a probe."""

    def __init__(self, links, name, port, probe):
        self.links, self.name, self.port, self.probe_io = links, name, port, probe
        self.mode, self.delay = "open", 0.0

    def set(self, mode, delay=0.0):
        """`open`, `delay` (seconds) or `drop` (every connection reset now)."""
        self.mode, self.delay = mode, (delay if mode == "delay" else 0.0)
        self.links.call(op="set", name=self.name, mode=mode, delay=self.delay)

    def probe(self, timeout):
        """Send the probe through the link: (seconds to the answer, answer bytes);
        answer b"" if the link closed or reset it, None if nothing came within `timeout`."""
        request, _ = self.probe_io
        start = time.monotonic()
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
                s.sendall(request)
                s.settimeout(max(0.05, timeout - (time.monotonic() - start)))
                data = s.recv(64)
                return time.monotonic() - start, data
        except socket.timeout:
            return time.monotonic() - start, None
        except OSError:
            return time.monotonic() - start, b""

    def verify(self):
        """Raise unless the link does what its mode says (the fault took effect)."""
        _, expect = self.probe_io
        if self.mode == "drop":
            took, data = self.probe(1.5)
            if data:
                raise RuntimeError(f"link {self.name}: dropping, yet the probe got {data[:20]!r}")
        elif self.mode == "delay":
            took, data = self.probe(2 * self.delay + 10.0)
            if not data or not data.startswith(expect):
                raise RuntimeError(f"link {self.name}: delayed probe got {data!r}")
            if took < 0.9 * self.delay:
                raise RuntimeError(f"link {self.name}: delay {self.delay:.2f}s, "
                                   f"yet the probe came back in {took:.2f}s")


# === the child process: the proxies themselves ===

def rst(writer):
    """Close with a reset, not a FIN: the peer sees the connection broken."""
    sock = writer.get_extra_info("socket")
    try:
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    writer.transport.abort()


class Proxy:
    def __init__(self, target_port, loop):
        self.target_port, self.loop = target_port, loop
        self.mode, self.delay = "open", 0.0
        self.conns = set()
        self.port = None

    async def listen(self):
        server = await asyncio.start_server(self.accept, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]

    async def set(self, mode, delay):
        self.mode, self.delay = mode, delay
        if mode == "drop":
            await self.drop_all()

    async def drop_all(self):
        for pair in list(self.conns):
            for w in pair:
                rst(w)
        self.conns.clear()

    async def accept(self, reader, writer):
        if self.mode == "drop":
            rst(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            rst(writer)
            return
        pair = (writer, up_writer)
        if self.mode == "drop":   # dropped while it connected
            rst(writer)
            rst(up_writer)
            return
        self.conns.add(pair)
        try:
            done, pending = await asyncio.wait(
                [asyncio.ensure_future(self.pipe(reader, up_writer)),
                 asyncio.ensure_future(self.pipe(up_reader, writer))],
                return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
        finally:
            self.conns.discard(pair)
            for w in pair:
                w.transport.abort() if self.mode == "drop" else w.close()

    async def pipe(self, reader, writer):
        """Pass bytes on, each chunk DELAY (as set when it was read) after it was read."""
        queue = asyncio.Queue()

        async def deliver():
            while True:
                at, data = await queue.get()
                wait = at - self.loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    return
                writer.write(data)
                await writer.drain()

        sender = asyncio.ensure_future(deliver())
        try:
            while True:
                data = await reader.read(65536)
                queue.put_nowait((self.loop.time() + self.delay, data))
                if not data:
                    break
            await sender
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            sender.cancel()


def serve():
    """The child: one JSON request a line on stdin, one answer a line on stdout."""
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    proxies = {}
    for line in sys.stdin:
        try:
            req = json.loads(line)
            if req["op"] == "link":
                proxy = Proxy(req["target"], loop)
                asyncio.run_coroutine_threadsafe(proxy.listen(), loop).result(10)
                proxies[req["name"]] = proxy
                answer = {"port": proxy.port}
            else:
                proxy = proxies[req["name"]]
                asyncio.run_coroutine_threadsafe(
                    proxy.set(req["mode"], req["delay"]), loop).result(10)
                answer = {"ok": True}
        except Exception as e:   # the driver raises it as the fault's failure
            answer = {"error": repr(e)}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__" and sys.argv[1:] == ["--serve"]:
    serve()
