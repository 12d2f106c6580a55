#!/usr/bin/env python3
"""A chart of one benchmark result, as a hand-written SVG (standard library only).

    python3 bench/plot.py bench/results/2026-12-03.json [-o chart.svg]

bench/run.py calls it after every run and writes `<result>.svg` beside `<result>.md`;
this entry point draws one from a result recorded earlier (and `<result>-latency.svg`, the
added-latency phase's chart, when the result has one). Three panels, each a set of
grouped bars, one group per kind of request, so every idem bar stands beside what it
must be compared with (the upstream reached directly, and nginx proxying the same
requests):

- requests per second of the median round, with the ratio to direct under each bar;
- the proxy's CPU per request (idem, or nginx master and workers), in µs;
- latency p50 / p99 / p99.9 per scenario, on a logarithmic axis (p50 and p99.9 differ
  by 10–100×; on a linear axis the medians would be invisible).

Readers would rather look than read a table of twelve numbers; the SVG is plain shapes
and text, so it shows in a browser and on GitHub without scripts or fonts.
"""

import argparse
import json
import math
import os
import sys
from html import escape

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# scenario -> (group, series). Order of groups and series is the order drawn.
GROUPS = ["fixed-body POST", "fresh intents", "replays (100 keys)", "duplicate storm"]
LAYOUT = {
    "direct": ("fixed-body POST", "direct"),
    "nginx_passthrough": ("fixed-body POST", "nginx"),
    "passthrough": ("fixed-body POST", "idem, passthrough"),
    "direct_keyed": ("fresh intents", "direct"),
    "nginx_keyed": ("fresh intents", "nginx"),
    "fresh_memory": ("fresh intents", "idem, memory"),
    "fresh_redis": ("fresh intents", "idem, Redis"),
    "fresh_postgres": ("fresh intents", "idem, PostgreSQL"),
    "nginx_replay": ("replays (100 keys)", "nginx"),
    "replay_redis": ("replays (100 keys)", "idem, Redis"),
    "replay_postgres": ("replays (100 keys)", "idem, PostgreSQL"),
    "storm_redis": ("duplicate storm", "idem, Redis"),
    "storm_postgres": ("duplicate storm", "idem, PostgreSQL"),
}
# Latency groups are one per scenario: short names, so that ten fit side by side.
SHORT = {
    "direct": "direct", "direct_keyed": "direct, keys", "passthrough": "passthrough",
    "fresh_memory": "fresh, mem", "fresh_redis": "fresh, Redis",
    "fresh_postgres": "fresh, PG", "replay_redis": "replay, Redis",
    "replay_postgres": "replay, PG", "storm_redis": "storm, Redis",
    "storm_postgres": "storm, PG", "nginx_passthrough": "nginx",
    "nginx_keyed": "nginx, keys", "nginx_replay": "nginx, replay",
}
COLOURS = {
    "direct": "#9e9e9e", "nginx": "#e8872e", "idem, passthrough": "#6baed6",
    "idem, memory": "#9ecae1", "idem, Redis": "#2171b5", "idem, PostgreSQL": "#6a51a3",
    "p50": "#c6dbef", "p99": "#4292c6", "p99.9": "#08306b",
    "idem": "#2171b5",
}
WIDTH, PANEL_H, TOP, LEFT, RIGHT = 980, 250, 40, 70, 20
FONT = 'font-family="Helvetica,Arial,sans-serif"'


def short(n):
    """12,345 -> 12k; 1,234 -> 1.2k; 5.0 -> 5; 0.66 -> 0.66."""
    if n < 10_000 and n == int(n):
        return f"{n:.0f}" if n < 1000 else f"{n / 1000:g}k"
    if n >= 10_000:
        return f"{n / 1000:.0f}k"
    if n >= 1000:
        return f"{n / 1000:.1f}k"
    if n >= 10:
        return f"{n:.0f}"
    return f"{n:.2f}".rstrip("0").rstrip(".") if n < 1 else f"{n:.1f}"


def nice_max(v):
    """The top of a linear axis at or above `v`, with round fifths (1, 1.5, 2, 2.5, 3,
    4, 5, 6, 8 × a power of ten)."""
    if v <= 0:
        return 1
    p = 10 ** math.floor(math.log10(v))
    return next(m * p for m in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10) if m * p >= v)


def text(x, y, s, size=12, anchor="middle", weight="normal", fill="#222"):
    return (f'<text x="{x:.1f}" y="{y:.1f}" {FONT} font-size="{size}" '
            f'text-anchor="{anchor}" font-weight="{weight}" fill="{fill}">{escape(s)}</text>')


def panel(y0, title, unit, groups, series, log=False):
    """One panel of grouped bars. `groups`: [(label, {series: (value, note)})]."""
    out = [text(LEFT, y0 + 16, title, 15, "start", "bold")]
    top, bottom = y0 + TOP, y0 + PANEL_H - 40
    plot_w = WIDTH - LEFT - RIGHT
    values = [v for _, bars in groups for v, _ in bars.values() if v > 0]
    if not values:
        return out + [text(WIDTH / 2, (top + bottom) / 2, "no data")]
    if log:
        # A decade below the smallest value when it sits near one, so its bar shows.
        lo = 10 ** math.floor(math.log10(min(values) / 2))
        hi = 10 ** math.ceil(math.log10(max(values)))
        ticks = [lo * 10 ** i for i in range(round(math.log10(hi / lo)) + 1)]

        def scale(v):
            return bottom - (math.log10(max(v, lo)) - math.log10(lo)) / math.log10(hi / lo) \
                * (bottom - top)
    else:
        hi = nice_max(max(values) * 1.08)
        ticks = [hi * i / 5 for i in range(6)]

        def scale(v):
            return bottom - v / hi * (bottom - top)
    for t in ticks:  # grid and axis labels
        y = scale(t)
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" '
                   'stroke="#e5e5e5"/>')
        out.append(text(LEFT - 6, y + 4, short(t), 11, "end", fill="#555"))
    out.append(text(16, (top + bottom) / 2, unit, 11, fill="#555")
               .replace("<text ", f'<text transform="rotate(-90 16 {(top + bottom) / 2:.1f})" '))
    out.append(f'<line x1="{LEFT}" y1="{bottom}" x2="{WIDTH - RIGHT}" y2="{bottom}" '
               'stroke="#333"/>')
    group_w = plot_w / len(groups)
    most = max(len(bars) for _, bars in groups)
    longest = max(len(label) for label, _ in groups)
    label_size = 12 if group_w > 9 * longest else 10
    bar_w = min(44, (group_w - 24) / most)
    for gi, (label, bars) in enumerate(groups):
        names = [s for s in series if s in bars]
        x = LEFT + gi * group_w + (group_w - bar_w * len(names)) / 2
        for name in names:
            v, note = bars[name]
            y = scale(v)
            out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w - 3:.1f}" '
                       f'height="{bottom - y:.1f}" fill="{COLOURS[name]}">'
                       f'<title>{escape(f"{label}, {name}: {v:,.2f} {unit}")}</title></rect>')
            out.append(text(x + (bar_w - 3) / 2, y - 4, short(v), 10))
            if note:
                out.append(text(x + (bar_w - 3) / 2, bottom + 13, note, 9, fill="#555"))
            x += bar_w
        out.append(text(LEFT + (gi + 0.5) * group_w, bottom + 28, label, label_size,
                        weight="bold"))
    return out


def legend(y, names):
    out, x = [], LEFT
    for name in names:
        out.append(f'<rect x="{x}" y="{y - 10}" width="12" height="12" '
                   f'fill="{COLOURS[name]}"/>')
        out.append(text(x + 17, y, name, 12, "start"))
        x += 30 + 7 * len(name)
    return out


def chart(data):
    """The SVG document for one result (the JSON bench/run.py writes)."""
    import run  # here, not at the top: run.py imports this module

    by = {}
    for r in data["results"]:
        by.setdefault(r["scenario"], []).append(r)
    med = {k: run.median_round(v) for k, v in by.items()}
    script = {s[0]: s[4] for s in run.SCENARIOS}

    def ratio(name):  # median of the per-round ratios to direct, as in the markdown
        base = run.BASELINE[script[name]]
        rounds = {r["round"]: r["rps"] for r in by.get(base, [])}
        vals = sorted(r["rps"] / rounds[r["round"]] for r in by[name] if r["round"] in rounds)
        return vals[len(vals) // 2] if vals else None

    rps, cpu = {g: {} for g in GROUPS}, {g: {} for g in GROUPS}
    for name, (group, series) in LAYOUT.items():
        if name not in med:
            continue
        r = ratio(name) if series != "direct" else None
        rps[group][series] = (med[name]["rps"], f"×{r:.2f}" if r else "")
        if series != "direct":
            cpu[group][series] = (med[name]["cpu_us_per_req"], "")
    for group in GROUPS[2:]:  # the direct reference of replays and storms: keyed POSTs
        if rps[group] and "direct_keyed" in med:
            rps[group] = {"direct": (med["direct_keyed"]["rps"], ""), **rps[group]}
    series = ["direct", "nginx", "idem, passthrough", "idem, memory", "idem, Redis",
              "idem, PostgreSQL"]
    used = [s for s in series if any(s in rps[g] for g in GROUPS)]
    lat = [(SHORT[name], {p: (med[name][k] / 1000, "") for p, k in
                   (("p50", "p50_us"), ("p99", "p99_us"), ("p99.9", "p999_us"))})
           for name in LAYOUT if name in med]
    m = data.get("machine", {})
    a = data.get("args", {})
    n = a.get("rounds", "?")
    rounds = f"{n} round" if n == 1 else f"{n} rounds"
    parts = [text(LEFT, 22, f"idem benchmark — commit {m.get('commit', '?')}, "
                  f"{m.get('cores', '?')} cores, wrk -t{a.get('threads', '?')} "
                  f"-c{a.get('connections', '?')}, {rounds} (the median round)",
                  16, "start", "bold")]
    parts += legend(48, used)
    y = 60
    parts += panel(y, "Requests per second (×: ratio to direct)", "req/s",
                   [(g, rps[g]) for g in GROUPS if rps[g]], used)
    y += PANEL_H
    parts += panel(y, "Proxy CPU per request (lower is better)", "µs/request",
                   [(g, cpu[g]) for g in GROUPS if cpu[g]], used[1:] if used[:1] == ["direct"]
                   else used)
    y += PANEL_H
    parts += panel(y, "Latency percentiles (log scale)", "ms", lat, ["p50", "p99", "p99.9"],
                   log=True)
    parts += legend(y + PANEL_H + 8, ["p50", "p99", "p99.9"])
    height = y + PANEL_H + 24
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}">\n'
            f'<rect width="{WIDTH}" height="{height}" fill="#fff"/>\n'
            + "\n".join(parts) + "\n</svg>\n")


def latency_chart(data):
    """The SVG of the added-latency phase (bench/latency.py): per scenario and load, the
    open-loop p50 and p99 of direct and of idem at the same rate, idem's bar marked with
    the added latency."""
    lat = data["extras"]["latency"]
    m = data.get("machine", {})
    p50, p99 = [], []
    for p in lat["points"]:
        group = f"{p['label']}, {p['load'] * 100:.0f}%"
        p50.append((group, {"direct": (p["direct"]["p50_us"], ""),
                            "idem": (p["idem"]["p50_us"], f"{p['added_p50_us']:+,.0f}")}))
        p99.append((group, {"direct": (p["direct"]["p99_us"], ""),
                            "idem": (p["idem"]["p99_us"], f"{p['added_p99_us']:+,.0f}")}))
    loads = " and ".join(f"{x * 100:.0f}%" for x in lat["loads"])
    parts = [text(LEFT, 22, f"idem added latency over direct — commit {m.get('commit', '?')}, "
                  f"{m.get('cores', '?')} cores, open loop at {loads} of idem's saturation",
                  16, "start", "bold")]
    parts += legend(48, ["direct", "idem"])
    y = 60
    parts += panel(y, "p50 latency from the due time, log scale (under idem's bar: added µs)",
                   "µs", p50, ["direct", "idem"], log=True)
    y += PANEL_H
    parts += panel(y, "p99 latency from the due time, log scale (under idem's bar: added µs)",
                   "µs", p99, ["direct", "idem"], log=True)
    height = y + PANEL_H + 8
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}">\n'
            f'<rect width="{WIDTH}" height="{height}" fill="#fff"/>\n'
            + "\n".join(parts) + "\n</svg>\n")


def write_latency(data, path):
    with open(path, "w") as f:
        f.write(latency_chart(data))
    return path


def write(data, path):
    with open(path, "w") as f:
        f.write(chart(data))
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("result", help="a bench/results/*.json written by bench/run.py")
    ap.add_argument("-o", "--out", help="the SVG to write (default: beside the JSON)")
    args = ap.parse_args()
    with open(args.result) as f:
        data = json.load(f)
    out = args.out or os.path.splitext(args.result)[0] + ".svg"
    print(write(data, out))
    if data.get("extras", {}).get("latency", {}).get("points"):
        print(write_latency(data, os.path.splitext(out)[0] + "-latency.svg"))


if __name__ == "__main__":
    main()
