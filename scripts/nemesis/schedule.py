"""The fault schedule: drawn up front from the seed alone (so a seed always replays the
same faults, in the same order, at the same offsets; only the run's exact timing
differs), then played by a thread while the traffic runs.

Fault kinds (the target is a replica `r0..r2`, the upstream, the store, or a link
`rN/upstream`, `rN/store` between a replica and what it talks to):
- `kill`:      SIGKILL a replica, start it again after 0.5–3 s (same ports, same clock file)
- `pause`:     SIGSTOP a replica for 1–3 s, or past its lease (lease+1 .. lease+5 s), SIGCONT
- `clock`:     step a replica's wall clock (libfaketime file) by +60/-60/+120/+30/-30 s,
               hold it 3–15 s, step back to real time
- `up-stall`:  for 1–2.5 s every execution the upstream starts answers after idem gave up
- `up-reset`:  for 1–2.5 s every execution the upstream starts is reset without an answer
- `st-restart`: SIGKILL the store (standalone Redis; a Sentinel replica; the PostgreSQL
               primary) and start it again after 0.3–2 s, data kept
- `st-pause`:  SIGSTOP the store (the Redis/Sentinel master, the PostgreSQL primary)
               for 0.3–2 s (Sentinel: ≤ 0.8 s, below its down-after of 1 s)
- `st-clock`:  step the store's own wall clock (the server that stamps leases, under
               libfaketime) by +30/-30/+60/-60 s for 2–8 s, then back: outside idem's
               reach (SPEC §1), so what it breaks is counted apart by the checker
- `link-delay`: for 2–5 s one replica's link to the upstream (every chunk 0.2–3 s late)
               or to the store (0.05–0.6 s late; not on Sentinel, see stores.py)
- `link-drop`: for 1–3 s one replica's link resets every connection, old and new
- `failover`:  once, half-way (`--store sentinel|postgres`): the primary killed for good,
               a replica promoted (Sentinel) / the synchronous standby promoted (pg_ctl)
At most two replicas are down or frozen at once; store faults (store links included:
their check needs the store to answer) never overlap.

Every injection is checked to have taken effect (cluster.py, links.py, the upstream's
probes); a fault is `injected` when its action ran and `effective` when the check saw it
happen. One that is not fails the run (check.py), and only effective faults excuse
anything.
"""

import random
import threading
import time

CLOCK_STEPS = [60, -60, 120, 30, -30]
STORE_STEPS = [30, -30, 60, -60]
KINDS = [("kill", 2), ("pause", 2), ("clock", 3), ("up-stall", 1), ("up-reset", 1),
         ("st-restart", 1), ("st-pause", 1), ("st-clock", 1), ("link-delay", 2),
         ("link-drop", 1)]
ALL = [k for k, _ in KINDS] + ["failover"]
STORE_KINDS = ("st-restart", "st-pause", "st-clock")


class Fault:
    def __init__(self, at, kind, target, length, offset=0, delay=0.0):
        self.at, self.kind, self.target, self.length, self.offset = at, kind, target, length, offset
        self.delay = delay
        self.started = self.ended = None   # when it really happened (run clock)
        self.injected = self.effective = False
        self.error = None
        self.checker = None                # a thread checking the fault took effect

    def describe(self):
        extra = f" {self.offset:+d}s" if self.kind in ("clock", "st-clock") else ""
        extra += f" {self.delay:.2f}s late" if self.kind == "link-delay" else ""
        return f"t={self.at:6.2f}s  {self.kind:<10} {self.target:<11} for {self.length:5.2f}s{extra}"


def make(seed, duration, replicas, store, lease, store_links=True):
    rng = random.Random(seed)
    faults, t = [], 3.0
    down_until = {f"r{i}": 0.0 for i in range(replicas)}
    clock_until = dict(down_until)
    store_until = 0.0
    link_until = {}
    failover_at = duration / 2 if store in ("sentinel", "postgres") else None
    if failover_at:
        faults.append(Fault(failover_at, "failover", "store", 0.0))
    end = duration - 8.0
    while t < end:
        kind = rng.choices([k for k, _ in KINDS], [w for _, w in KINDS])[0]
        target = f"r{rng.randrange(replicas)}"
        if kind == "kill":
            length = rng.uniform(0.5, 3.0)
        elif kind == "pause":
            length = rng.uniform(1.0, 3.0) if rng.random() < 0.5 else lease + rng.uniform(1, 5)
        elif kind == "clock":
            length = rng.uniform(3.0, 15.0)
        elif kind in ("up-stall", "up-reset"):
            length, target = rng.uniform(1.0, 2.5), "upstream"
        elif kind == "st-clock":
            length, target = rng.uniform(2.0, 8.0), "store"
        elif kind in ("link-delay", "link-drop"):
            to = "store" if store_links and rng.random() < 0.5 else "upstream"
            target = f"{target}/{to}"
            length = rng.uniform(2.0, 5.0) if kind == "link-delay" else rng.uniform(1.0, 3.0)
        else:
            cap = 0.8 if store == "sentinel" and kind == "st-pause" else 2.0
            length, target = rng.uniform(0.3, cap), "store"
        offset = rng.choice(CLOCK_STEPS) if kind == "clock" else 0
        offset = rng.choice(STORE_STEPS) if kind == "st-clock" else offset
        delay = 0.0
        if kind == "link-delay":
            delay = rng.uniform(0.05, 0.6) if target.endswith("/store") else rng.uniform(0.2, 3.0)
        ok = True
        if kind in ("kill", "pause"):
            impaired = sum(1 for r, u in down_until.items() if u > t and r != target)
            ok = down_until[target] <= t and impaired < 2
            if ok:
                down_until[target] = t + length + 1.0
        elif kind == "clock":
            ok = clock_until[target] <= t
            if ok:
                clock_until[target] = t + length + 0.5
        elif target == "store" or target.endswith("/store"):
            near_failover = failover_at is not None and failover_at - 3 < t + length + 1 \
                and t < failover_at + 10
            ok = store_until <= t and not near_failover
            if target.endswith("/store"):
                ok = ok and link_until.get(target, 0.0) <= t
            if ok:
                store_until = t + length + 1.5
                link_until[target] = t + length + 0.5
        elif kind in ("link-delay", "link-drop"):
            ok = link_until.get(target, 0.0) <= t
            if ok:
                link_until[target] = t + length + 0.5
        if ok and t + length < duration - 3.0:
            faults.append(Fault(t, kind, target, length, offset, delay))
        t += rng.uniform(1.0, 3.0)
    faults.sort(key=lambda f: f.at)
    return faults


class Player:
    """Plays the schedule against the run's processes, checking each injection took
    effect; `errors` lists every fault that did not (the run fails on any)."""

    def __init__(self, faults, replicas, store, upstream, links, clock):
        self.faults, self.clock = faults, clock
        self.replicas = {f"r{i}": r for i, r in enumerate(replicas)}
        self.store, self.upstream, self.links = store, upstream, links
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.errors = []

    def start(self):
        self.thread.start()

    def join(self):
        self.thread.join()
        for f in self.faults:
            if f.checker is not None:
                f.checker.join()
            if f.error is None and not (f.injected and f.effective):
                f.error = "not checked to have taken effect"
                self.errors.append(f"{f.describe()}: {f.error}")

    def fail(self, f, e):
        if f.error is None:
            f.error = repr(e)
        self.errors.append(f"{f.describe()}: {e!r}")

    def run(self):
        actions = []
        for f in self.faults:
            actions.append((f.at, 0, f, True))
            if f.kind != "failover":
                actions.append((f.at + f.length, 1, f, False))
        actions.sort(key=lambda a: (a[0], a[1]))
        for at, _, fault, begin in actions:
            delay = at - self.clock()
            if delay > 0:
                time.sleep(delay)
            if begin:
                fault.started = self.clock()
            try:
                if begin:
                    self.begin(fault)
                else:
                    if fault.checker is not None:
                        fault.checker.join()
                    self.end(fault)
            except Exception as e:   # a fault that could not be injected fails the run
                self.fail(fault, e)
            if not begin:
                fault.ended = self.clock()

    def check_later(self, f, check):
        """Run `check` in a thread (it waits on the network); the fault's end waits for it."""
        def run():
            try:
                check()
                f.effective = True
            except Exception as e:
                self.fail(f, e)
        f.checker = threading.Thread(target=run, daemon=True)
        f.checker.start()

    def begin(self, f):
        r = self.replicas.get(f.target)
        if f.kind == "kill":
            f.injected = True
            r.kill(check=True)
        elif f.kind == "pause":
            f.injected = True
            r.pause(check=True)
        elif f.kind == "clock":
            f.injected = True
            r.set_clock(f.offset, check=r.proc.poll() is None)
        elif f.kind in ("up-stall", "up-reset"):
            self.upstream.mode = f.kind[3:]
            f.injected = True
            self.check_later(f, lambda: self.upstream.check_mode(f.kind[3:], f.at))
            return
        elif f.kind == "st-restart":
            f.server = self.store.restart_target()
            if f.server is None:
                raise RuntimeError("no store server to restart")
            f.injected = True
            f.server.kill(check=True)
        elif f.kind == "st-pause":
            f.server = self.store.pause_target()
            f.injected = True
            f.server.pause(check=True)
        elif f.kind == "st-clock":
            f.server = self.store.clock_target()
            f.injected = True
            f.server.set_clock(f.offset, check=True)
        elif f.kind in ("link-delay", "link-drop"):
            links = self.links[f.target]
            for link in links:
                link.set(f.kind[5:], f.delay)
            f.injected = True
            self.check_later(f, self.links.probe_link(f.target).verify)
            return
        elif f.kind == "failover":
            f.injected = True
            f.checker = threading.Thread(target=self.failover, args=(f,), daemon=True)
            f.checker.start()
            return
        f.effective = True

    def end(self, f):
        r = self.replicas.get(f.target)
        if f.kind == "kill":
            r.start(check=True)
        elif f.kind == "pause":
            r.resume(check=True)
        elif f.kind == "clock":
            r.set_clock(0, check=r.proc.poll() is None)
        elif f.kind in ("up-stall", "up-reset"):
            self.upstream.mode = None
        elif f.kind == "st-restart":
            f.server.start()
        elif f.kind == "st-pause":
            f.server.resume(check=True)
        elif f.kind == "st-clock":
            f.server.set_clock(0, check=True)
        elif f.kind in ("link-delay", "link-drop"):
            for link in self.links[f.target]:
                link.set("open")

    def failover(self, f):
        try:
            self.store.failover()
            f.effective = True
        except Exception as e:
            self.fail(f, e)
        f.ended = self.clock()

    def heal(self):
        """After the schedule: every replica running, unfrozen, on real time; the store
        on real time; every link open; the upstream answering."""
        for r in self.replicas.values():
            r.resume()
            r.set_clock(0)
            if r.proc.poll() is not None:
                r.start()
        for f in self.faults:
            if f.kind == "st-clock" and getattr(f, "server", None) is not None:
                f.server.set_clock(0)
        self.links.open_all()
        self.upstream.mode = None
