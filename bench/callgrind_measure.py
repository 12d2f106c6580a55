"""How bench/callgrind.py counts one request: drive a proxy with N, then 2N sequential
keep-alive POSTs, read callgrind's totals (or `strace -c`'s system calls) of each run,
and what Redis did meanwhile; the difference over N is one request's cost, with start-up
and shutdown cancelled out.
"""

import hashlib
import http.client
import os
import re

import callgrind_redis as redis_usage
import callgrind_targets as targets
import run

BODY = run.BODY


def same_length(tag):
    """The tag as 12 hex characters: distinct tags, keys of one length."""
    return hashlib.sha256(tag.encode()).hexdigest()[:12]


def drive(port, path, keying, n, tag, size=0):
    """`n` sequential POSTs on one keep-alive connection; every answer must be 2xx."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for i in range(n):
        headers = {"content-type": "application/json"}
        if size:
            headers["x-bench-body-bytes"] = str(size)
        # Every key has the same length whatever the tag ("before-…" or not) and the
        # request's number: idem hashes the key, and a longer key can take one more
        # SHA-256 block (about 2k instructions under valgrind), which would be counted
        # as a difference between two builds.
        if keying == "unique":
            headers["idempotency-key"] = f"cg-{same_length(tag)}-{i:07d}"
        elif keying == "same":
            # One key per scenario (the tag without its run suffix): Redis outlives the
            # runs, and a replay scenario must not replay another scenario's record.
            headers["idempotency-key"] = f"cg-replayed-{same_length(tag.rsplit('-', 1)[0])}"
        conn.request("POST", path, body=BODY, headers=headers)
        resp = conn.getresponse()
        resp.read()
        if resp.status >= 300:
            raise RuntimeError(f"{path}: status {resp.status} on request {i}")
    conn.close()


def syscall_counts(out_file):
    """{syscall: calls} from a `strace -c` summary."""
    counts = {}
    with open(out_file) as f:
        for line in f:
            cols = line.split()
            # % time, seconds, usecs/call, calls, [errors,] syscall
            if len(cols) >= 5 and cols[3].isdigit() and not cols[-1].startswith("total"):
                counts[cols[-1]] = int(cols[3])
    return counts


def total_instructions(out_file):
    """Sum of `summary:`/`totals:` over the per-thread dump files (with --syscalls:
    the system calls `strace -c` counted)."""
    if targets.COUNTER["tool"] == "strace":
        return sum(syscall_counts(out_file).values())
    total = 0
    d, base = os.path.split(out_file)
    for name in os.listdir(d):
        if not name.startswith(base):
            continue
        with open(os.path.join(d, name)) as f:
            for line in f:
                m = re.match(r"(?:summary|totals):\s+(\d+)", line)
                if m:
                    total += int(m.group(1))
                    break
    return total


def measure(ctx, start, path, keying, n, tag, size=0):
    """Total instructions of one process started by `start(out_file)` serving `n`
    requests (a replay's first execution is made before, and counted in both runs), and
    what Redis did meanwhile (callgrind_redis.used)."""
    out = os.path.join(ctx["workdir"], f"callgrind-{tag}-{n}.out")
    # Every run starts from an empty store: what a start-up reads (idem indexes the
    # records in progress once, with one SCAN) must not differ between the N and 2N
    # runs, or it is counted as a per-request cost.
    ctx["redis"].cli("FLUSHALL")
    target = start(out)
    try:
        path = target.path or path
        if keying == "same":
            drive(target.port, path, keying, 1, tag, size)  # the first execution, not measured
        before = redis_usage.snapshot(ctx["redis"])
        drive(target.port, path, keying, n, tag, size)
        redis_used = redis_usage.used(before, redis_usage.snapshot(ctx["redis"]))
    finally:
        target.stop()
    total = total_instructions(out)
    if total == 0:
        raise RuntimeError(f"{tag}: no callgrind counts in {out}*")
    return total, redis_used


def per_request(ctx, start, path, keying, n, tag, size=0):
    """(instructions per request, Redis's cost per request: callgrind_redis.PerRequest)."""
    small, redis_small = measure(ctx, start, path, keying, n, f"{tag}-a", size)
    large, redis_large = measure(ctx, start, path, keying, 2 * n, f"{tag}-b", size)
    return (large - small) / n, redis_usage.PerRequest(redis_small, redis_large, n)


def print_syscalls(title, small_file, large_file, n, total):
    small, large = syscall_counts(small_file), syscall_counts(large_file)
    rows = sorted(((large.get(k, 0) - small.get(k, 0)) / n, k) for k in set(small) | set(large))
    print()
    print(f"#### {title}: {total:.2f} system calls per request")
    print()
    print("| system call | per request |")
    print("|---|---:|")
    for per, name in reversed(rows):
        if per >= 0.01:
            print(f"| `{name}` | {per:.2f} |")
