"""Settling and judging a nemesis run, from the upstream's own counts and the callers'
answers (never idem's metrics).

Settling: once the faults have stopped and every lease has run out, each intent is
repeated once more (until a definitive answer) and idem's `GET /v1/unknown` is read.

Violations:
- `double-execution`: a `hold` intent executed more than once; a `retry` intent
  executed again when the documented case does not apply. Documented (SPEC §1 "Unknown
  outcomes", `on_unknown: retry`): the previous execution's outcome was unknown to idem —
  the upstream reset it or answered after `upstream.timeout`, its replica was killed, its
  replica was frozen or the store unreachable (alone or back to back) for most of a lease (docs/reliability.md,
  "Known limits": a completion that cannot be written for the whole lease), or the store
  failed over meanwhile — and the repeat came after its lease could end, i.e. at least
  2/3 of a lease after that fault (renewals run every lease/3), minus TOLERANCE (see
  `excuse`). Those are counted as `documented re-executions`.
- `different-2xx`: callers of one intent got 2xx answers with different bodies, or a
  body that is not one of that intent's executions (allowed only between documented
  re-executions).
- `unsettled-not-listed`: an intent still unsettled after the run (its settling repeat
  got 409 `outcome_unknown`, or no definitive answer) that `GET /v1/unknown` does not list.
- `idem-error`: a 500 (or another 5xx than 502/503/504) from idem.
"""

import concurrent.futures
import json
import time
import urllib.request

from workload import Answer, send

TOLERANCE = 1.0


def settle(intents, replicas, clock, lease):
    """Repeat every intent until it gets a definitive answer (or 30 s pass)."""
    def one(i, intent):
        deadline = clock() + 30
        k = i
        while True:
            replica = replicas[k % len(replicas)]
            status, code, body = send(replica, intent, "settle")
            definitive = not (status in (0, 503, 504)
                              or (status == 409 and code == "request_in_progress"))
            if definitive or clock() > deadline:
                intent.final = (status, code, body)
                if 200 <= status < 300:
                    intent.record(Answer(clock(), "settle", replica.name, status, code, body))
                return
            k += 1
            time.sleep(lease if status == 504 else 0.3)
    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda a: one(*a), enumerate(intents)))


def unknown_listing(replicas):
    for r in replicas:
        try:
            with urllib.request.urlopen(r.admin_url("/v1/unknown?limit=1000"), timeout=5) as resp:
                listing = json.loads(resp.read())
                return {(u["route"], u["key"]) for u in listing["unknown"]}, listing["truncated"]
        except (OSError, ValueError, KeyError):
            continue
    return None, False


def excuse(prev, faults, lease, upstream_timeout):
    """From when a repeat of execution `prev` may be executed again (run clock), and why;
    None if nothing made its outcome unknown to idem. The fault must have made idem lose
    the outcome: the upstream reset or stalled it; its replica was killed; its replica was
    frozen, or the store unreachable (restart, freeze: from the kill to the store's
    readiness), long enough for the lease to run out (2/3 lease: the last renewal may be
    lease/3 old); or the store failed over. The lease ends at least 2/3 lease after.

    The owner's freezes and kill and the store's outages are merged when less than MERGE_GAP lies
    between them: the owner cannot renew or complete through either, and a failed renewal
    is retried within MERGE_GAP (`proxy/lease.rs`), so back-to-back outages cut it off as
    one long one (seed 11, 10 minutes on Redis: a store restart, the owner frozen 0.6 s
    later, then a second store restart)."""
    end = prev.end if prev.end is not None else float("inf")
    need = 2 / 3 * lease - TOLERANCE
    reasons = []
    if prev.how == "reset":
        reasons.append((prev.end, "upstream reset it"))
    elif prev.how == "stalled":
        reasons.append((prev.start + upstream_timeout, "upstream stalled"))
    cut_off = []
    for f in faults:
        if f.started is None:
            continue
        f_end = f.ended if f.ended is not None else float("inf")
        mine = f.target == prev.replica
        if f.kind == "kill" and mine:
            # A killed owner never writes for this attempt again, restarted or not: a
            # kill during the call excuses whatever the length of its outage.
            killed = f.started <= end + 2.0 and f_end >= prev.start - 0.2
            cut_off.append((f.started, f_end, f"replica {prev.replica} killed", killed))
        elif f.kind == "pause" and mine:
            cut_off.append((f.started, f_end, f"replica {prev.replica} frozen", False))
        elif f.kind in ("st-restart", "st-pause"):
            cut_off.append((f.started, f_end, f"store {f.kind[3:]}", False))
        elif f.kind == "failover" and f.started <= end + 2.0 and f_end >= prev.start - 0.2:
            lost_at = max(min(f.started, end), prev.start)
            reasons.append((lost_at - 2 / 3 * lease, "store failover"))
    for started, f_end, what, killed in merged(cut_off):
        if not (started <= end + 2.0 and f_end >= prev.start - 0.2):
            continue
        lost_at = max(min(started, end), prev.start)
        if killed:
            reasons.append((lost_at, what))
        elif f_end - lost_at >= need:
            reasons.append((lost_at, f"{what} {f_end - started:.1f}s"))
    if not reasons:
        return None
    at, why = min(reasons)
    return at + 2 / 3 * lease - TOLERANCE, why


MERGE_GAP = 0.5


def merged(intervals):
    """Intervals (start, end, what, killed) joined where less than MERGE_GAP separates
    them; a joined one is `killed` when any of its parts is."""
    out = []
    for start, end, what, killed in sorted(intervals):
        if out and start - out[-1][1] < MERGE_GAP:
            s0, e0, w0, k0 = out[-1]
            out[-1] = (s0, max(e0, end), w0 if w0 == what else f"{w0} + {what}", k0 or killed)
        else:
            out.append((start, end, what, killed))
    return out


def judge(intents, upstream, faults, listed, lease, upstream_timeout):
    by_key = {i.key: i for i in intents}
    violations, documented = [], []
    foreign = [k for k in upstream.executions if k not in by_key]
    for k in foreign:
        violations.append(("foreign-key", k, f"the upstream saw key {k!r}, no intent's"))
    for intent in intents:
        runs = upstream.executions.get(intent.key, [])
        excused = True
        if intent.route == "hold" and len(runs) > 1:
            excused = False
            violations.append(("double-execution", intent.key, describe_runs(runs)))
        if intent.route == "retry":
            for prev, nxt in zip(runs, runs[1:]):
                ok = excuse(prev, faults, lease, upstream_timeout)
                if ok is not None and nxt.start >= ok[0]:
                    documented.append((intent.key, f"#{nxt.n} after {ok[1]}"))
                    continue
                excused = False
                why = "nothing made it unknown" if ok is None else \
                    f"{ok[1]}, but {ok[0] - nxt.start:.2f}s before its lease could end"
                violations.append(("double-execution", intent.key,
                                   f"execution #{nxt.n} ({why}): {describe_runs(runs)}"))
        bodies = {a.body for a in intent.answers if 200 <= a.status < 300}
        real = {e.body for e in runs}
        if (len(bodies) > 1 and not (excused and len(runs) > 1)) or bodies - real:
            violations.append(("different-2xx", intent.key,
                               f"{len(bodies)} bodies: {sorted(b.decode() for b in bodies)}"))
        for a in intent.answers:
            if a.status >= 500 and a.status not in (502, 503, 504):
                violations.append(("idem-error", intent.key, f"{a.status} {a.body[:200]!r}"))
        status, code, _ = intent.final
        if not (200 <= status < 300) and listed is not None \
                and (intent.route, intent.key) not in listed:
            violations.append(("unsettled-not-listed", intent.key,
                               f"settling repeat got {status} {code}; not in /v1/unknown"))
    if listed is None:
        violations.append(("unknown-listing", "-", "GET /v1/unknown answered on no replica"))
    return violations, documented


def dump(path, intents, upstream, faults):
    """The whole history as JSON (for a closer look at a failing seed)."""
    out = {"faults": [{"kind": f.kind, "target": f.target, "offset": f.offset,
                       "planned": f.at, "started": f.started, "ended": f.ended} for f in faults],
           "intents": [{"key": i.key, "final": [i.final[0], i.final[1]] if i.final else None,
                        "answers": [[a.at, a.caller, a.replica, a.status, a.code,
                                     a.body.decode(errors="replace")] for a in i.answers],
                        "executions": [[e.n, e.replica, e.caller, e.start, e.end, e.how]
                                       for e in upstream.executions.get(i.key, [])]}
                       for i in intents]}
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


def reasons(documented):
    """Documented re-executions by cause ("r1 killed" and "r2 killed" are one cause)."""
    out = {}
    for _, why in documented:
        cause = " ".join(w for w in why.split(" after ", 1)[1].split()
                         if not w[0].isdigit() and not (w[0] == "r" and w[1:].isdigit()))
        out[cause] = out.get(cause, 0) + 1
    return out


def describe_runs(runs):
    return "; ".join(f"#{e.n} via {e.replica} at {e.start:.2f}s {e.how}"
                     + (f" {e.end:.2f}s" if e.end is not None else "") for e in runs)


def summary(replay, seed, store, minutes, intents, workload, faults, upstream, violations,
            documented, listed, injection_errors):
    kinds = {}
    for f in faults:
        if f.started is not None:
            kinds[f.kind] = kinds.get(f.kind, 0) + 1
    executions = sum(len(v) for v in upstream.executions.values())
    finals = {}
    for i in intents:
        s, c, _ = i.final
        label = f"{s} {c}".strip()
        finals[label] = finals.get(label, 0) + 1
    rows = [
        ("seed", seed), ("store", store), ("minutes", minutes),
        ("intents", f"{len(intents)} ({sum(i.route == 'hold' for i in intents)} hold, "
                    f"{sum(i.route == 'retry' for i in intents)} retry)"),
        ("duplicates sent", workload.duplicates),
        ("requests sent", sum(i.sent for i in intents)),
        ("faults injected", f"{sum(kinds.values())}: "
                            + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))),
        ("executions", f"{executions} ({sum(1 for v in upstream.executions.values() if v)} "
                       f"intents executed)"),
        ("documented re-executions", f"{len(documented)}" + (" (after: " + ", ".join(
            f"{k} {n}" for k, n in sorted(reasons(documented).items())) + ")" if documented else "")),
        ("settling answers", ", ".join(f"{k}: {n}" for k, n in sorted(finals.items()))),
        ("listed unknown", "?" if listed is None else len(listed)),
        ("faults not injected", len(injection_errors)),
        ("violations", len(violations)),
    ]
    width = max(len(k) for k, _ in rows)
    print("\n" + "-" * 72)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    print("-" * 72)
    for kind in sorted({v[0] for v in violations}):
        print(f"  {kind}: {sum(1 for v in violations if v[0] == kind)}")
    for kind, key, detail in violations[:40]:
        print(f"VIOLATION {kind} {key}: {detail}")
    if len(violations) > 40:
        print(f"... and {len(violations) - 40} more")
    for e in injection_errors:
        print(f"fault not injected: {e}")
    print(("FAIL" if violations else "PASS") + f" (replay: {replay})")
