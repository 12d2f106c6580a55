"""Where one process's CPU goes, by component, from a `perf record` of it (used by
bench/split.py --perf).

perf samples the process natively (cpu-clock, so it works in VMs without a PMU);
each sample's own symbol is put in one component by the first rule that matches.
Inlining blurs the edges (a hyper function inlined into idem's code counts as idem's,
and a generic `Future::poll` is "other"), so read the shares to a few percent.
The kernel line is split further by call-graph ("children") share: the loopback
receive work a sender does for its peer (`net_rx_action`), reads, the event wait,
and scheduling.
"""

import re
import subprocess

# (component, test on (dso, symbol)), first match wins; "[k]" symbols are the kernel.
RULES = [
    ("tokio (runtime, timers, channels)", lambda d, s: "tokio" in s),
    ("hyper (HTTP/1 server and client)", lambda d, s: "hyper" in s),
    ("http, httparse (header maps, parsing)", lambda d, s: s.startswith(("http::", "httparse"))
     or "http::header" in s),
    ("redis-rs (commands, replies, multiplexer)", lambda d, s: "redis::" in s or "combine::" in s),
    ("allocator", lambda d, s: "jemalloc" in d or re.match(r"_?mi_|malloc|free$|realloc|cfree", s)
     or "mimalloc" in s),
    ("memcpy/memmove/memset", lambda d, s: re.search(r"mem(cpy|move|set|cmp)", s) is not None),
    ("clock (vDSO)", lambda d, s: "vdso" in d),
    ("sha2", lambda d, s: "sha2" in s or "sha256" in s),
    ("serde_json", lambda d, s: "serde" in s),
    ("idem's own code", lambda d, s: "idem::" in s),
    ("nginx's own code", lambda d, s: s.startswith("ngx_")),
    ("Redis's own code", lambda d, s: "redis-server" in d or "redis-check" in d),
]

KERNEL_PARTS = [
    ("net_rx_action", "loopback receive for the peer, run by the sender (softirq)"),
    ("__x64_sys_recvfrom", "socket reads"),
    ("__x64_sys_read", "reads"),
    ("__x64_sys_epoll_wait", "waiting for events"),
    ("__schedule", "scheduling"),
]


def record(pids, seconds, out):
    """Start `perf record` on `pids` for `seconds`; returns the Popen (wait on it)."""
    return subprocess.Popen(
        ["perf", "record", "-F", "999", "-g", "-o", out, "-p", ",".join(map(str, pids)), "--",
         "sleep", str(seconds)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _report(path, children):
    argv = ["perf", "report", "-i", path, "--stdio", "-g", "none", "-t", "\t",
            "--children" if children else "--no-children",
            "--sort", "sym" if children else "dso,sym"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return [line.split("\t") for line in out.splitlines()
            if line and not line.startswith("#")]


def shares(path):
    """[(component, percent of the process's samples)], largest first, and the kernel's
    [(part, children percent)]."""
    totals = {}
    for row in _report(path, children=False):
        if len(row) < 3:
            continue
        pct, dso, sym = float(row[0].strip().rstrip("%")), row[1].strip(), row[2].strip()
        if sym.startswith("[k]"):
            name = "kernel"
        else:
            sym = sym.removeprefix("[.]").strip()
            name = next((n for n, test in RULES if test(dso, sym)), "other")
        totals[name] = totals.get(name, 0.0) + pct
    kernel = []
    wanted = dict(KERNEL_PARTS)
    for row in _report(path, children=True):
        if len(row) >= 3:
            sym = row[2].strip().removeprefix("[k]").strip()
            if sym in wanted:
                kernel.append((wanted[sym], float(row[0].strip().rstrip("%"))))
    return sorted(totals.items(), key=lambda kv: -kv[1]), kernel


def print_shares(name, path, us_per_request):
    """Print the components of `name`'s CPU, as a share and in µs per request."""
    parts, kernel = shares(path)
    print(f"  {name}: where its {us_per_request:.1f} µs/req go (perf, self time)")
    for component, pct in parts:
        if pct >= 0.5:
            print(f"    {pct:5.1f} %  {us_per_request * pct / 100:5.1f} µs  {component}")
        if component == "kernel":
            for part, kpct in kernel:
                print(f"             of which {kpct:4.1f} % {part}")
