"""Settling and judging a nemesis run, from the upstream's own counts and the callers'
answers (never idem's metrics).

Settling: once the faults have stopped and every lease has run out, each intent is
repeated once more (until a definitive answer) and idem's `GET /v1/unknown` is read.

Violations:
- `fault-not-effective`: a scheduled fault whose injection failed or was not seen to
  take effect (schedule.py): the run did not test what it says, so it fails.
- `double-execution`, counted in effects at the upstream (a `retry` repeat the
  upstream deduplicated is not an effect):
  - `retry`: more than one effect, whatever happened. The upstream keeps the key for
    longer than the route's `upstream_key_window` (plus every store clock step), so
    nothing excuses a second effect: idem forwarded past the window.
  - `hold` and `reconcile`: more than one effect, unless the re-execution is EXPLAINED,
    which is counted and printed apart, never silently:
    - `store clock step`: an effective `st-clock` fault overlapped the earlier
      execution's lease (from a lease before it started) up to the re-execution: a
      store whose own clock steps is outside idem's reach (SPEC §1);
    - `lookup blind to the call` (`reconcile`): the repeat that executed again had
      asked the upstream's search (the lookup carries its caller), the search answered
      absent, and the earlier execution had not completed at that moment (still
      running, or still on its way through a delayed link): the search sees a call only
      once it is done, and absent means "forward it again" (SPEC §1). Only when idem
      had lost that execution's outcome and its lease could have ended by the lookup
      (`lost`), else a lookup on a live lease is a takeover idem must not make.
- `different-2xx`: callers of one intent got 2xx answers naming different executions
  (allowed only when every re-execution of it is explained), or one naming none of its
  executions. A body names an execution by its id: the execution's own answer, the
  operator's resolution (the upstream's recorded answer) or the search's
  `{"data": [answer]}` that reconciled it.
- `unsettled-not-listed`: an intent still unsettled after the run (its settling repeat
  got 409 `outcome_unknown`, or no definitive answer) that `GET /v1/unknown` does not list.
- `idem-error`: a 500 (or another 5xx than 502/503/504) from idem.
"""

import concurrent.futures
import json
import time
import urllib.request

from workload import Answer, retryable, send


def settle(intents, replicas, clock, lease):
    """Repeat every intent until it gets a definitive answer (or 30 s pass)."""
    def one(i, intent):
        deadline = clock() + 30
        k = i
        while True:
            replica = replicas[k % len(replicas)]
            status, code, body = send(replica, intent, "settle")
            definitive = not retryable(status, code)
            if definitive or clock() > deadline:
                intent.final = (status, code, body)
                if 200 <= status < 300:
                    intent.record(Answer(clock(), "settle", replica.name, status, code, body))
                return
            k += 1
            time.sleep(lease if status == 504 else 1.0 if code.endswith("+retry") else 0.3)
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


def execution_id(body):
    """The execution a 2xx body names (see the module doc), or the body itself."""
    try:
        doc = json.loads(body)
        if isinstance(doc, dict) and isinstance(doc.get("data"), list) and doc["data"]:
            doc = doc["data"][0]
        return doc["id"]
    except (ValueError, KeyError, TypeError, IndexError):
        return body.decode(errors="replace")


def blind_lookup(prev, nxt, lookups):
    """The search whose absent answer made `nxt` happen (the latest one its caller's
    repeat asked before it), if it could not see `prev`; else None."""
    asked = [l for l in lookups if l.caller == nxt.caller and l.at <= nxt.start]
    if not asked or asked[-1].found is not None:
        return None
    last = asked[-1]
    return last if prev.end is None or prev.end > last.at else None


TOLERANCE = 1.0
MERGE_GAP = 0.5
RECONNECT_PACING = 2.0


def lost(prev, faults, lease, upstream_timeout):
    """From when a repeat may find `prev`'s lease ended (run clock), and why; None if no
    effective fault made idem lose its outcome. The fault must have: the upstream reset
    or stalled it, or the owner's link to the upstream dropped or delayed it; the owner
    was killed; the owner was frozen, or cut off from the store (a store restart or
    freeze, from the kill to its readiness; its own store link dropped or delayed) long
    enough for the lease to run out (2/3 lease: the last renewal may be lease/3 old); or
    the store failed over. The lease ends at least 2/3 lease after, less TOLERANCE.

    The owner's freezes and kill and its store outages are merged when less than
    MERGE_GAP lies between them: the owner renews through neither, and a failed renewal
    is retried within MERGE_GAP (`proxy/lease.rs`), so back-to-back outages cut it off
    as one long one (seed 11, 10 minutes on Redis).

    A cut-off that lasts until the owner's call ends (the upstream stalled or reset it)
    counts however short it is: renewals stop with the call (SPEC §1, a timed-out
    attempt is held until its lease expires, no renewals), so none comes after the
    cut-off began. Its end is taken RECONNECT_PACING later, since a store client that
    failed to connect waits before it tries again (PostgreSQL: 100 ms doubling to 2 s,
    `store/postgres/reconnect.rs`). PostgreSQL seed 54, 10 minutes: r1's store link
    dropped for 2.2 s, from 0.1 s before the attempt's first renewal; every renewal
    failed until its call timed out 0.6 s after the link came back, while the pacing
    still held off the next connection; the lease ended unrenewed and the reconcile
    lookup 2 s later was blind to the stalled call."""
    end = prev.end if prev.end is not None else float("inf")
    need = 2 / 3 * lease - TOLERANCE
    reasons = []
    call_end = None
    if prev.how == "reset":
        call_end = prev.end
        reasons.append((prev.end, "upstream reset it"))
    elif prev.how == "stalled":
        call_end = prev.start + upstream_timeout
        reasons.append((call_end, "upstream stalled"))
    cut_off = []
    for f in faults:
        if f.started is None or not f.effective:
            continue
        f_end = f.ended if f.ended is not None else float("inf")
        during = f.started <= end + 2.0 and f_end >= prev.start - 0.2
        mine = f.target == prev.replica
        if f.kind == "kill" and mine:
            # A killed owner never writes for this attempt again, restarted or not.
            cut_off.append((f.started, f_end, f"replica {prev.replica} killed", during))
        elif f.kind == "pause" and mine:
            cut_off.append((f.started, f_end, f"replica {prev.replica} frozen", False))
        elif f.kind in ("st-restart", "st-pause"):
            cut_off.append((f.started, f_end, f"store {f.kind[3:]}", False))
        elif f.kind in ("link-drop", "link-delay") and f.target == f"{prev.replica}/store":
            cut_off.append((f.started, f_end, f"store {f.kind}", False))
        elif f.kind == "link-drop" and f.target == f"{prev.replica}/upstream" and during:
            reasons.append((max(f.started, prev.start), "upstream link dropped"))
        elif f.kind == "link-delay" and f.target == f"{prev.replica}/upstream" \
                and f.started <= end + 2.0 and f_end >= prev.start - 2 * f.delay:
            reasons.append((prev.start + upstream_timeout - 2 * f.delay, "upstream link delayed"))
        elif f.kind == "failover" and during:
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
        elif call_end is not None and started <= call_end <= f_end + RECONNECT_PACING:
            reasons.append((lost_at, f"{what} {f_end - started:.1f}s until the call ended"))
    if not reasons:
        return None
    at, why = min(reasons)
    return at + 2 / 3 * lease - TOLERANCE, why


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


def clock_step(prev, nxt, faults, lease):
    """An effective store clock step overlapping prev's lease up to nxt, or None."""
    for f in faults:
        if f.kind == "st-clock" and f.effective and f.started is not None:
            ended = f.ended if f.ended is not None else float("inf")
            if f.started <= nxt.start and ended >= prev.start - lease - 1.0:
                return f
    return None


def judge(intents, upstream, faults, listed, lease, upstream_timeout):
    by_key = {i.key: i for i in intents}
    violations, explained = [], []
    for f in faults:
        if not (f.injected and f.effective) or f.error is not None:
            # Its begin, or its end (the process back, the store committing again).
            violations.append(("fault-not-effective", f.kind,
                               f"{f.describe().strip()}: {f.error or 'not injected'}"))
    for k in upstream.executions:
        if k not in by_key:
            violations.append(("foreign-key", k, f"the upstream saw key {k!r}, no intent's"))
    for intent in intents:
        runs = upstream.executions.get(intent.key, [])
        lookups = upstream.lookups.get(intent.key, [])
        all_explained = True
        if intent.route == "retry" and len(runs) > 1:
            all_explained = False
            violations.append(("double-execution", intent.key,
                               f"{len(runs)} effects where the upstream deduplicates the key "
                               f"for {upstream.dedup_window:g}s: {describe_runs(runs)}"))
        elif len(runs) > 1:
            for prev, nxt in zip(runs, runs[1:]):
                step = clock_step(prev, nxt, faults, lease)
                if step is not None:
                    explained.append((intent.key, f"#{nxt.n} after store clock step",
                                      step.describe().strip()))
                    continue
                blind = blind_lookup(prev, nxt, lookups) if intent.route == "reconcile" else None
                why = lost(prev, faults, lease, upstream_timeout) if blind else None
                if blind is not None and why is not None and blind.at >= why[0]:
                    explained.append((intent.key, f"#{nxt.n} after lookup blind to the call",
                                      f"search at {blind.at:.2f}s by {blind.caller} answered "
                                      f"absent; #{prev.n} " + (
                                          "never completed" if prev.end is None else
                                          f"completed at {prev.end:.2f}s") + f" ({why[1]})"))
                    continue
                all_explained = False
                detail = "nothing explains it" if blind is None else \
                    f"its search at {blind.at:.2f}s was blind to #{prev.n}, but " + (
                        "nothing made idem lose it" if why is None else
                        f"{why[1]}: {why[0] - blind.at:.2f}s before its lease could end")
                violations.append(("double-execution", intent.key,
                                   f"execution #{nxt.n} ({detail}): {describe_runs(runs)}"))
        named = {execution_id(a.body) for a in intent.answers if 200 <= a.status < 300}
        real = {json.loads(e.body)["id"] for e in runs}
        if (len(named) > 1 and not (all_explained and len(runs) > 1)) or named - real:
            violations.append(("different-2xx", intent.key,
                               f"{len(named)} executions named: {sorted(named)}; "
                               f"real: {sorted(real)}"))
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
    return violations, explained


def dump(path, intents, upstream, faults, resolutions):
    """The whole history as JSON (for a closer look at a failing seed)."""
    out = {"faults": [{"kind": f.kind, "target": f.target, "offset": f.offset,
                       "delay": f.delay, "planned": f.at, "started": f.started,
                       "ended": f.ended, "injected": f.injected, "effective": f.effective,
                       "error": f.error} for f in faults],
           "resolutions": [[r.at, r.route, r.key, r.attempt, r.outcome, r.status, r.replica,
                            r.execution] for r in resolutions],
           "intents": [{"key": i.key, "final": [i.final[0], i.final[1]] if i.final else None,
                        "answers": [[a.at, a.caller, a.replica, a.status, a.code,
                                     a.body.decode(errors="replace")] for a in i.answers],
                        "executions": [[e.n, e.replica, e.caller, e.start, e.end, e.how]
                                       for e in upstream.executions.get(i.key, [])],
                        "deduplicated": upstream.hits.get(i.key, []),
                        "lookups": [[l.at, l.caller, l.found]
                                    for l in upstream.lookups.get(i.key, [])]}
                       for i in intents]}
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


def causes(explained):
    out = {}
    for _, why, _ in explained:
        cause = why.split(" after ", 1)[1]
        out[cause] = out.get(cause, 0) + 1
    return out


def describe_runs(runs):
    return "; ".join(f"#{e.n} via {e.replica} ({e.caller}) at {e.start:.2f}s {e.how}"
                     + (f" {e.end:.2f}s" if e.end is not None else "") for e in runs)


def fault_table(faults):
    """Per kind: scheduled, injected, effective."""
    out = {}
    for f in faults:
        row = out.setdefault(f.kind, [0, 0, 0])
        row[0] += 1
        row[1] += f.injected
        row[2] += f.injected and f.effective
    return out


def summary(replay, seed, store, minutes, intents, workload, faults, upstream, violations,
            explained, listed, injection_errors, oncall):
    executions = sum(len(v) for v in upstream.executions.values())
    finals = {}
    for i in intents:
        s, c, _ = i.final
        label = f"{s} {c}".strip()
        finals[label] = finals.get(label, 0) + 1
    table = fault_table(faults)
    lookups = [l for v in upstream.lookups.values() for l in v]
    routes = {r: sum(i.route == r for i in intents) for r in ("hold", "retry", "reconcile")}
    rows = [
        ("seed", seed), ("store", store), ("minutes", minutes),
        ("intents", f"{len(intents)} (" + ", ".join(f"{n} {r}" for r, n in routes.items()) + ")"),
        ("duplicates sent", workload.duplicates),
        ("requests sent", sum(i.sent for i in intents)),
        ("faults", f"{len(faults)} scheduled, {sum(f.injected for f in faults)} injected, "
                   f"{sum(f.injected and f.effective for f in faults)} effective"),
    ] + [(f"  {k}", f"{a} scheduled, {b} injected, {c} effective")
         for k, (a, b, c) in sorted(table.items())] + [
        ("executions", f"{executions} ({sum(1 for v in upstream.executions.values() if v)} "
                       f"intents executed)"),
        ("retry repeats deduplicated", f"{sum(len(v) for v in upstream.hits.values())} "
                                       f"(by the upstream, {upstream.dedup_window:g}s window)"),
        ("reconcile lookups", f"{len(lookups)} ({sum(l.found is not None for l in lookups)} "
                              f"found, {sum(l.found is None for l in lookups)} absent)"),
        ("operator", f"{oncall.listings} listings ({oncall.listing_errors} found no replica "
                     "answering); resolved: " + (", ".join(
            f"{k} {n}" for k, n in sorted(oncall.counts().items())) or "none")),
        ("explained re-executions", f"{len(explained)}" + (" (after: " + ", ".join(
            f"{k} {n}" for k, n in sorted(causes(explained).items())) + ")" if explained else "")),
        ("settling answers", ", ".join(f"{k}: {n}" for k, n in sorted(finals.items()))),
        ("listed unknown", "?" if listed is None else len(listed)),
        ("faults not effective", len(injection_errors)),
        ("violations", len(violations)),
    ]
    width = max(len(k) for k, _ in rows)
    print("\n" + "-" * 72)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    print("-" * 72)
    for key, why, detail in explained[:40]:
        print(f"EXPLAINED {key} {why}: {detail}")
    if len(explained) > 40:
        print(f"... and {len(explained) - 40} more explained")
    for kind in sorted({v[0] for v in violations}):
        print(f"  {kind}: {sum(1 for v in violations if v[0] == kind)}")
    for kind, key, detail in violations[:40]:
        print(f"VIOLATION {kind} {key}: {detail}")
    if len(violations) > 40:
        print(f"... and {len(violations) - 40} more")
    for e in injection_errors:
        print(f"fault not effective: {e}")
    print(("FAIL" if violations else "PASS") + f" (replay: {replay})")
