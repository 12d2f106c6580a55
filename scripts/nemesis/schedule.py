"""The fault schedule: drawn up front from the seed alone (so a seed always replays the
same faults, in the same order, at the same offsets; only the run's exact timing
differs), then played by a thread while the traffic runs.

Fault kinds (the target is a replica `r0..r2`, the upstream, or the store):
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
- `failover`:  once, half-way (`--store sentinel|postgres`): the primary killed for good,
               a replica promoted (Sentinel) / the synchronous standby promoted (pg_ctl)
At most two replicas are down or frozen at once; store faults never overlap.
"""

import random
import threading
import time

CLOCK_STEPS = [60, -60, 120, 30, -30]
KINDS = [("kill", 2), ("pause", 2), ("clock", 3), ("up-stall", 1), ("up-reset", 1),
         ("st-restart", 1), ("st-pause", 1)]
ALL = [k for k, _ in KINDS] + ["failover"]


class Fault:
    def __init__(self, at, kind, target, length, offset=0):
        self.at, self.kind, self.target, self.length, self.offset = at, kind, target, length, offset
        self.started = self.ended = None   # when it really happened (run clock)

    def describe(self):
        extra = f" {self.offset:+d}s" if self.kind == "clock" else ""
        return f"t={self.at:6.2f}s  {self.kind:<10} {self.target:<8} for {self.length:5.2f}s{extra}"


def make(seed, duration, replicas, store, lease):
    rng = random.Random(seed)
    faults, t = [], 3.0
    down_until = {f"r{i}": 0.0 for i in range(replicas)}
    clock_until = dict(down_until)
    store_until = 0.0
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
        else:
            cap = 0.8 if store == "sentinel" and kind == "st-pause" else 2.0
            length, target = rng.uniform(0.3, cap), "store"
        offset = rng.choice(CLOCK_STEPS) if kind == "clock" else 0
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
        elif target == "store":
            near_failover = failover_at is not None and failover_at - 3 < t + length + 1 \
                and t < failover_at + 10
            ok = store_until <= t and not near_failover
            if ok:
                store_until = t + length + 1.5
        if ok and t + length < duration - 3.0:
            faults.append(Fault(t, kind, target, length, offset))
        t += rng.uniform(1.0, 3.0)
    faults.sort(key=lambda f: f.at)
    return faults


class Player:
    """Plays the schedule against the run's processes; `log` lists what really happened."""

    def __init__(self, faults, replicas, store, upstream, clock):
        self.faults, self.clock = faults, clock
        self.replicas = {f"r{i}": r for i, r in enumerate(replicas)}
        self.store, self.upstream = store, upstream
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.errors = []

    def start(self):
        self.thread.start()

    def join(self):
        self.thread.join()

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
            try:
                self.act(fault, begin)
            except Exception as e:   # a fault that could not be injected is reported
                self.errors.append(f"{fault.describe()}: {e!r}")
            if begin:
                fault.started = self.clock()
            else:
                fault.ended = self.clock()

    def act(self, f, begin):
        r = self.replicas.get(f.target)
        if f.kind == "kill":
            r.kill() if begin else r.start()
        elif f.kind == "pause":
            r.pause() if begin else r.resume()
        elif f.kind == "clock":
            r.set_clock(f.offset if begin else 0)
        elif f.kind in ("up-stall", "up-reset"):
            self.upstream.mode = f.kind[3:] if begin else None
        elif f.kind == "st-restart":
            if begin:
                f.server = self.store.restart_target()
                if f.server is not None:
                    f.server.kill()
            elif f.server is not None:
                f.server.start()
        elif f.kind == "st-pause":
            if begin:
                f.server = self.store.pause_target()
                f.server.pause()
            else:
                f.server.resume()
        elif f.kind == "failover":
            threading.Thread(target=self.failover, args=(f,), daemon=True).start()

    def failover(self, f):
        try:
            self.store.failover()
        except Exception as e:
            self.errors.append(f"failover: {e!r}")
        f.ended = self.clock()

    def heal(self):
        """After the schedule: every replica running, unfrozen, on real time."""
        for r in self.replicas.values():
            r.resume()
            r.set_clock(0)
            if r.proc.poll() is not None:
                r.start()
        self.upstream.mode = None
