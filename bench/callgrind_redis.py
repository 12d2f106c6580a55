"""Redis's own cost per request, for bench/callgrind.py: in a fleet of sidecars the
shared Redis saturates first, so what each intent costs it matters as much as idem's own
instructions.

Two figures, each by the same N vs 2N difference as the instructions (start-up and the
measuring commands cancel out):
- `INFO commandstats`: calls and `usec` per request, by command. `usec` is the time
  Redis spent executing the commands (Lua included), not reading or writing sockets.
  Redis counts a command a script calls twice: under its own name, and inside the
  script's `usec`. So when scripts ran, the total is the scripts' own `usec` (plus any
  command the client sent directly, which a script-based client here does not), and the
  commands they called are listed "in scripts";
- `INFO cpu`: Redis's whole CPU time (user + system, getrusage), sockets included.

Both are timings of a native process, so they move with the machine's load (the
instruction counts do not): compare figures of one run.
"""

import re


def snapshot(redis):
    """({command: (calls, usec)}, cpu seconds) of the Redis behind `redis` (run.Redis)."""
    stats = {}
    for line in redis.cli("INFO", "commandstats").splitlines():
        m = re.match(r"cmdstat_([^:]+):calls=(\d+),usec=(\d+)", line)
        if m:
            stats[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    cpu = 0.0
    for line in redis.cli("INFO", "cpu").splitlines():
        m = re.match(r"used_cpu_(?:sys|user):([\d.]+)", line)
        if m:
            cpu += float(m.group(1))
    return stats, cpu


def used(before, after):
    """What Redis did between two snapshots: ({command: (calls, usec)}, cpu seconds)."""
    (s0, c0), (s1, c1) = before, after
    stats = {}
    for cmd, (calls, usec) in s1.items():
        calls0, usec0 = s0.get(cmd, (0, 0))
        if calls > calls0:
            stats[cmd] = (calls - calls0, usec - usec0)
    return stats, c1 - c0


# The commands that run a script; what they call is counted inside their `usec` too.
SCRIPTS = ("eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro")


class PerRequest:
    """Redis's cost of one request: the difference of a 2N and an N run, over N."""

    def __init__(self, small, large, n):
        (s_small, cpu_small), (s_large, cpu_large) = small, large
        self.commands = {}
        for cmd in set(s_small) | set(s_large):
            calls = (s_large.get(cmd, (0, 0))[0] - s_small.get(cmd, (0, 0))[0]) / n
            usec = (s_large.get(cmd, (0, 0))[1] - s_small.get(cmd, (0, 0))[1]) / n
            if calls >= 0.01:
                self.commands[cmd] = (calls, usec)
        scripts = [cmd for cmd in self.commands if cmd in SCRIPTS]
        # With scripts, the other commands counted are those the scripts called.
        self.top = scripts or list(self.commands)
        self.calls = sum(self.commands[cmd][0] for cmd in self.top)
        self.usec = sum(self.commands[cmd][1] for cmd in self.top)
        self.cpu_usec = (cpu_large - cpu_small) * 1e6 / n

    def commands_text(self):
        """`evalsha 1.00, set 1.00`: the commands of one request, most called first."""
        def text(cmds):
            rows = sorted(cmds, key=lambda cmd: -self.commands[cmd][0])
            return ", ".join(f"{cmd} {self.commands[cmd][0]:.2f}" for cmd in rows)

        inner = [cmd for cmd in self.commands if cmd not in self.top]
        return text(self.top) + (f" (in scripts: {text(inner)})" if inner else "")


def print_table(rows):
    """`rows`: (who, PerRequest), e.g. ("idem fresh-redis", ...), ("floor fresh", ...)."""
    print()
    print("Redis per request (INFO commandstats and INFO cpu, same N vs 2N difference):")
    print()
    print("| who | commands per request | calls | commandstats µs | Redis CPU µs |")
    print("|---|---|---:|---:|---:|")
    for who, r in rows:
        print(f"| {who} | {r.commands_text()} | {r.calls:.2f} | {r.usec:.1f} "
              f"| {r.cpu_usec:.1f} |")
