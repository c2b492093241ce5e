"""`switchcraft traffic report`: the console's numbers without a browser, as markdown, JSON, SVG and PNG.

    from serving.console.report import traffic_report
    numbers = traffic_report("runs/gateway/log", "runs/traffic", pool=load_pool("configs/pools/bfcl_v3_2025.yaml"),
                             state=StateSettings(path="runs/gateway"), range_name="all")

Writes into `out`: `report.md` (every view's figures), `traffic.json` (the same numbers, as the query functions
return them), and one chart per view as `<name>.svg` (the console's own drawing, serving/console/charts.py) and
`<name>.png` (matplotlib). The figures come from serving/console/queries.py and quality.py, the functions the
console's pages call: one implementation.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from data.pool import Pool
from serving.console import charts
from serving.console.logdb import open_log, since_of
from serving.console.quality import quality
from serving.console.headline import headline, money, share_text
from serving.console.queries import cascades, key_spend, router_versions, traffic


def gather(log: str | Path, pool: Pool, *, range_name: str = "all", reference: str | None = None,
           ledger: list | None = None, limits: dict | None = None, now: float | None = None,
           router_info: dict | None = None) -> dict[str, Any]:
    """Every view's numbers for the log (and the ledger rows, when a state store was given). `router_info`: the
    router.json of the router in service (its novelty.safe_model is the reference's second rule)."""
    now = time.time() if now is None else now
    since = since_of(range_name, now)
    with open_log(log, since) as db:
        q = quality(db, since=since, pool_names=pool.names)
        out = {"range": range_name, "since": since, "generated": now,
               "savings": headline(db, pool, since=since, now=now, reference=reference, router_info=router_info,
                                   per_model=q["per_model"]),
               "quality": q, "cascades": cascades(db, since=since, now=now),
               "traffic": traffic(db, since=since, now=now), "router_versions": router_versions(db, since=since, now=now)}
    if ledger is not None:
        from serving.core.budget import spend_report

        out["keys_today"] = key_spend(ledger, now=now, limits=limits)
        out["spend"] = spend_report(ledger)["totals"]
    return out


def read_ledger(state) -> list:
    """Every ledger row of the store `state` (serving.core.state.StateSettings) names."""
    from serving.core.state import open_state

    async def read():
        store = open_state(state)
        try:
            return await store.ledger()
        finally:
            await store.aclose()
    return asyncio.run(read())


def chart_data(n: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    """name -> ("columns" | "bars", arguments) of every chart the report draws."""
    s, t, q = n["savings"], n["traffic"], n["quality"]
    out: dict[str, tuple[str, Any]] = {
        "savings": ("columns", ([r["group"] for r in s["per_day"]], {
            "spent": [r["spent_usd"] for r in s["per_day"]],
            f"all to {s['reference']['model']} (estimate)": [r["reference_usd"] for r in s["per_day"]]},
            "spend vs reference", "USD")),
        "requests": ("columns", ([r["group"] for r in t["over_time"]], {
            "requests": [r["requests"] for r in t["over_time"]], "errors": [r["errors"] for r in t["over_time"]]},
            "requests", "requests")),
        "models": ("bars", ([(m["name"], m["requests"]) for m in t["models"]], "answering model", "requests")),
        "strategies": ("bars", ([(m["name"], m["requests"]) for m in t["strategies"]], "strategy", "requests")),
        "quality": ("bars", ([(m["model"], m["mean"] or 0.0) for m in q["per_model"]],
                             "agreement with consensus", "")),
    }
    if "keys_today" in n:
        k = n["keys_today"]
        out["keys"] = ("bars", ([(x["key"], x["usd"]) for x in k["keys"]], f"spend per key on {k['day']}", "USD"))
    return out


def draw_png(kind: str, args, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2))
    if kind == "columns":
        labels, series, title, unit = args
        width = 0.8 / max(1, len(series))
        for j, (name, values) in enumerate(series.items()):
            ax.bar([i + j * width for i in range(len(labels))], values, width, label=name)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(labels))], labels, rotation=30, fontsize=7)
        ax.legend(fontsize=8)
    else:
        items, title, unit = args
        ax.barh([str(a) for a, _ in items][::-1], [v for _, v in items][::-1])
        ax.tick_params(labelsize=7)
    ax.set_title(title)
    ax.set_ylabel(unit if kind == "columns" else "")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


_usd = money


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.1f}%"


def _pairs(pairs) -> str:
    return ", ".join(f"{a}: {b}" for a, b in pairs)


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v:,.1f} ms"


def markdown(n: dict[str, Any], charts_written: list[str]) -> str:
    s, q, c, t = n["savings"], n["quality"], n["cascades"], n["traffic"]
    ref = s["reference"]
    lines = [f"# Traffic report ({n['range']}, generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(n['generated']))})",
             "", "## Savings (estimate)", "",
             f"- answered requests: {s['requests']}", f"- spent by the callers: {_usd(s['spent_usd'])}",
             f"- exploration (the cost of learning): {_usd(s['explore_usd'])} in {s['explore_calls']} calls",
             f"- reference: {ref['model']} ({s['reference_rule']}: {s['reference_why']})",
             f"- all to {ref['model']} (estimate): {_usd(s['reference_usd'])}",
             f"- saved net of exploration (estimate): {'not shown' if s['flags'] else _usd(s['saved_usd'])}; "
             f"{share_text(s)}",
             f"- how: each request at {ref['model']}'s prices × its logged input tokens + {ref['output_tokens']:.0f} "
             f"output tokens ({ref['output_source']}); {s['without_tokens']} requests without token counts count at "
             "the mean", "", "| day | requests | spent | reference (est.) | saved before exploration (est.) |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {r['group']} | {r['requests']} | {_usd(r['spent_usd'])} | {_usd(r['reference_usd'])} | "
              f"{_usd(r['saved_usd'])} |" for r in s["per_day"]]
    lines += ["", "| key | requests | spent | reference (est.) | saved before exploration (est.) |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {r['group'] or '(none)'} | {r['requests']} | {_usd(r['spent_usd'])} | {_usd(r['reference_usd'])} "
              f"| {_usd(r['saved_usd'])} |" for r in s["per_key"]]
    sv = q["served"]
    lines += ["", "## Quality (estimate: consensus on explored requests)", "",
              f"- served answers right: {_pct(sv['mean'])} [95%: {_pct(sv['low'])}, {_pct(sv['high'])}], "
              f"n = {sv['n']} of {q['explored']} explored requests",
              f"- cascades: {c['cascades']}; agreement {_pct(c['agreement']['mean'])} [95%: "
              f"{_pct(c['agreement']['low'])}, {_pct(c['agreement']['high'])}]; escalation "
              f"{_pct(c['escalation']['mean'])} ({c['escalation']['k']})",
              f"- verdicts: {_pairs(sorted(c['verdicts'].items())) or 'none'}",
              f"- disagreement kinds: {_pairs((k['kind'], k['requests']) for k in c['kinds']) or 'none'}",
              "", "| model | agrees with consensus | 95% interval | n |", "|---|---:|---:|---:|"]
    lines += [f"| {m['model']} | {_pct(m['mean'])} | {_pct(m['low'])} – {_pct(m['high'])} | {m['n']} |"
              for m in q["per_model"]]
    lat = t["latency"]
    lines += ["", "## Traffic", "", f"- requests: {t['requests']}",
              f"- request latency P50 / P99: {_ms(lat['request_p50_ms'])} / {_ms(lat['request_p99_ms'])}",
              f"- upstream call latency P50 / P99: {_ms(lat['upstream_p50_ms'])} / {_ms(lat['upstream_p99_ms'])}",
              f"- gateway overhead P50 / P99: {_ms(lat['overhead_p50_ms'])} / {_ms(lat['overhead_p99_ms'])}",
              f"- strategies: {_pairs((m['name'], m['requests']) for m in t['strategies'])}",
              f"- answering models: {_pairs((m['name'], m['requests']) for m in t['models'])}",
              f"- errors by status: {_pairs((e['status'], e['requests']) for e in t['errors']) or 'none'}",
              f"- failed upstream calls: {_pairs((e['outcome'], e['calls']) for e in t['failed_calls']) or 'none'}",
              "", "| model | calls | P50 | P99 |", "|---|---:|---:|---:|"]
    lines += [f"| {m['model']} | {m['calls']} | {_ms(m['p50_ms'])} | {_ms(m['p99_ms'])} |" for m in t["upstream_latency"]]
    lines += ["", "| model | calls | spent | of which exploration |", "|---|---:|---:|---:|"]
    lines += [f"| {m['model']} | {m['calls']} | {_usd(m['usd'])} | {_usd(m['explore_usd'])} |" for m in t["spend_per_model"]]
    lines += ["", "| time (UTC) | request P50 | request P99 | overhead P50 | overhead P99 |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {r['group']} | {_ms(r['p50_ms'])} | {_ms(r['p99_ms'])} | {_ms(r['overhead_p50_ms'])} | "
              f"{_ms(r['overhead_p99_ms'])} |" for r in t["latency_over_time"]]
    if "keys_today" in n:
        k = n["keys_today"]
        lines += ["", f"## Keys and budgets ({k['day']}, UTC)", "", "| key | calls | spent | limit / day | used |",
                  "|---|---:|---:|---:|---:|"]
        lines += [f"| {x['key']} | {x['calls']} | {_usd(x['usd'])} | {_usd(x['limit_usd'])} | {_pct(x['used_share'])} |"
                  for x in k["keys"]]
        lines += ["", "Every day (as `switchcraft spend`):", "", "| day | key | calls | total |", "|---|---|---:|---:|"]
        lines += [f"| {x['day']} | {x['key']} | {x['calls']} | {_usd(x['usd'])} |" for x in n["spend"]]
    lines += ["", "## Router versions", "", "| version | first request | last request | requests |", "|---|---|---|---:|"]
    fmt = "%Y-%m-%d %H:%M:%S"
    lines += [f"| {v['version']} | {time.strftime(fmt, time.gmtime(v['first_ts']))} | "
              f"{time.strftime(fmt, time.gmtime(v['last_ts']))} | {v['requests']} |" for v in n["router_versions"]]
    lines += ["", "## Charts", ""] + [f"![{name}]({name}.png)" for name in charts_written]
    return "\n".join(lines) + "\n"


def traffic_report(log: str | Path, out: str | Path, *, pool: Pool, state=None, range_name: str = "all",
                   reference: str | None = None, limits: dict | None = None, png: bool = True,
                   router_info: dict | None = None) -> dict[str, Any]:
    """Write report.md, traffic.json and the charts (SVG, PNG) into `out`; return the numbers."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ledger = read_ledger(state) if state is not None else None
    n = gather(log, pool, range_name=range_name, reference=reference, ledger=ledger, limits=limits,
               router_info=router_info)
    written = []
    for name, (kind, args) in chart_data(n).items():
        if kind == "columns":
            labels, series, title, unit = args
            svg = charts.columns(labels, series, title=title, unit=unit)
        else:
            items, title, unit = args
            svg = charts.bars(items, title=title, unit=unit)
        (out / f"{name}.svg").write_text(svg)
        if png:
            draw_png(kind, args, out / f"{name}.png")
        written.append(name)
    (out / "traffic.json").write_text(json.dumps(n, indent=1, default=str))
    (out / "report.md").write_text(markdown(n, written if png else []))
    return n
