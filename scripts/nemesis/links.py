"""The network between each idem replica and what it talks to: one small TCP proxy per
link (replica → upstream, replica → each store server), so the schedule can delay one
replica's traffic or cut it off without touching the others.

A link is `open` (bytes pass at once), `delay` (every chunk read in either direction is
passed on DELAY seconds after it was read, in order: a request already written reaches
the far end late, which is what SPEC §1 leaves outside idem's reach when it outlasts a
lease) or `drop` (every connection through it is reset, RST, and new ones are reset on
accept). Each fault is verified through the link itself (`probe`): a delay must hold a
probe's answer back, a drop must reset the probe.

All proxies share one asyncio loop in a thread of the driver; standard library only.
"""

import asyncio
import socket
import struct
import threading
import time

MAX_DELAY = 3.0   # the longest delay the schedule draws; the operator waits past it


class Links:
    """The loop and every proxy of the run."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.all = []
        self.by_target, self.probes = {}, {}
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

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
        link = Link(name, target_port, probe, self.loop)
        asyncio.run_coroutine_threadsafe(link.listen(), self.loop).result(10)
        self.all.append(link)
        return link

    def stop(self):
        self.open_all()
        self.loop.call_soon_threadsafe(self.loop.stop)


def rst(writer):
    """Close with a reset, not a FIN: the peer sees the connection broken."""
    sock = writer.get_extra_info("socket")
    try:
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    writer.transport.abort()


class Link:
    def __init__(self, name, target_port, probe, loop):
        self.name, self.target_port, self.probe_io, self.loop = name, target_port, probe, loop
        self.mode, self.delay = "open", 0.0
        self.conns = set()
        self.port = None

    async def listen(self):
        server = await asyncio.start_server(self.accept, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]

    def set(self, mode, delay=0.0):
        """From the scheduler's thread: `open`, `delay` (seconds) or `drop`."""
        self.mode, self.delay = mode, (delay if mode == "delay" else 0.0)
        if mode == "drop":
            asyncio.run_coroutine_threadsafe(self.drop_all(), self.loop).result(5)

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
            # Generous: the driver's threads (every caller is one) may hold the loop back.
            took, data = self.probe(2 * self.delay + 10.0)
            if not data or not data.startswith(expect):
                raise RuntimeError(f"link {self.name}: delayed probe got {data!r}")
            if took < 0.9 * self.delay:
                raise RuntimeError(f"link {self.name}: delay {self.delay:.2f}s, "
                                   f"yet the probe came back in {took:.2f}s")
