"""Instructions per request by component, from the two callgrind runs (N and 2N
requests) bench/callgrind.py makes of one process (its `--breakdown`).

Each function's self cost ("exclusive": what its own instructions cost, with inlined
callees counted where they were inlined) comes from `callgrind_annotate`; the function
is put in a component by the crate its symbol names (see CRATES), so a generic hyper
function compiled into idem still counts as hyper's.
(cost in the 2N run − cost in the N run) / N is the component's share of one request,
with start-up and shutdown cancelled out as in the total.
"""

import re
import subprocess
from collections import defaultdict

# Components by the crate a function belongs to: the first crate named in its
# demangled symbol other than Rust's own library (`core::ptr::drop_in_place<hyper::…>`
# and `<alloc::boxed::Box<tokio::…> as core::future::Future>::poll` count as hyper's and
# tokio's). Release builds have no line tables, so the symbol is all there is.
CRATES = [
    ("hyper (HTTP/1 server and client)", ("hyper", "hyper_util")),
    ("tokio (scheduler, I/O driver, timers, channels)", ("tokio", "tokio_util")),
    ("http, httparse, http-body (header maps, parsing)",
     ("http", "httparse", "http_body", "http_body_util")),
    ("redis-rs (commands, replies, multiplexer)", ("redis", "combine")),
    ("futures, bytes and other glue crates",
     ("futures_util", "futures_core", "futures_channel", "bytes", "pin_project_lite", "slab",
      "mio", "arc_swap", "tower_service", "either", "smallvec", "hashbrown")),
    ("tracing, metrics", ("tracing", "tracing_core", "tracing_subscriber", "prometheus_client",
                          "opentelemetry", "opentelemetry_sdk")),
    ("codecs (sha2, serde_json, base64, itoa, ring)",
     ("sha2", "serde_json", "serde", "base64", "itoa", "ryu", "ring", "memchr", "hex")),
    ("idem's own code", ("idem",)),
]
STD = ("core", "alloc", "std")
SYMBOL_CRATE = re.compile(r"(?:^|[<\s&(,\[*])([a-z_][a-z0-9_]*)::")


def component(func):
    if func.startswith("ring_core_"):
        return "codecs (sha2, serde_json, base64, itoa, ring)"
    if func.startswith(("mi_", "_mi_")) or "mimalloc" in func:
        return "allocator (mimalloc)"
    if re.search(r"mem(cpy|move|set|cmp)|__memc|bcmp", func):
        return "memcpy/memmove/memset/memcmp (libc)"
    if func.startswith("ngx_"):
        return "nginx's own code"
    crates = [c for c in SYMBOL_CRATE.findall(func) if c not in STD]
    if crates:
        return next((name for name, owned in CRATES if crates[0] in owned),
                    f"other crates ({crates[0]})")
    if SYMBOL_CRATE.search(func):
        return "Rust std (Vec/String, hashing, fmt, drops of std types)"
    return "libc and the rest (malloc in nginx, syscall wrappers, unnamed)"


LINE = re.compile(r"^\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*?):(.+?)(?:\s+\[(.*)\])?\s*$")


def _functions(out_file):
    """{(file, function): exclusive instructions} of one callgrind output file."""
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=no", "--threshold=100", out_file],
        capture_output=True, text=True, check=True).stdout
    costs = {}
    body = False
    for line in text.splitlines():
        if re.match(r"^\s*Ir\s+file:function", line):
            body = True
            continue
        if not body or not line.strip() or line.startswith("-"):
            continue
        m = LINE.match(line)
        if m:
            file, func = m.group(2), m.group(3)
            if file == "???" and m.group(4):
                file = m.group(4)
            costs[(file, func)] = costs.get((file, func), 0) + int(m.group(1).replace(",", ""))
    return costs


def per_request(small_file, large_file, n):
    """[(component, instructions per request)], largest first, and the top functions."""
    small, large = _functions(small_file), _functions(large_file)
    by_component = defaultdict(float)
    by_function = defaultdict(float)
    for key in set(small) | set(large):
        delta = (large.get(key, 0) - small.get(key, 0)) / n
        by_component[component(key[1])] += delta
        by_function[key] += delta
    parts = sorted(by_component.items(), key=lambda kv: -kv[1])
    top = sorted(by_function.items(), key=lambda kv: -kv[1])[:25]
    return parts, top


def short(func, width=110):
    """A function name cut to `width`."""
    return func if len(func) <= width else func[:width - 1] + "…"


def print_table(title, parts, top, total):
    print()
    print(f"#### {title}: {total:,.0f} instructions per request")
    print()
    print("| component | instr/req | share |")
    print("|---|---:|---:|")
    for name, value in parts:
        if abs(value) >= 50:
            print(f"| {name} | {value:,.0f} | {100 * value / total:.1f} % |")
    print()
    print("<details><summary>largest functions (self cost)</summary>")
    print()
    print("| function | instr/req |")
    print("|---|---:|")
    for (file, func), value in top:
        print(f"| `{short(func)}` | {value:,.0f} |")
    print()
    print("</details>")
