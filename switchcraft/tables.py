"""Rich tables the commands share."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table


def print_by_reason(console: Console, title: str, key: str, counts: Mapping[tuple[str, str], int]) -> None:
    """Rows left out, counted per (`key`, reason): never silently dropped. Prints nothing when none were."""
    if not counts:
        return
    table = Table(title=title)
    for col in (key, "reason", "rows"):
        table.add_column(col)
    for (k, reason), n in sorted(counts.items()):
        table.add_row(k, reason, f"{n:,}")
    console.print(table)


# The rows the first screen keeps, by name (the names evaluation/report/ gives them in metrics.json's headline).
STRATEGY_ROWS = "switchcraft strategies"
REFERENCE_ROWS = {"best single model": "best single", "cheapest model": "cheapest", "oracle": "oracle"}
# Row names cut to fit a narrow column; the footnote says what the cut words were.
SHORTER = ((f"{STRATEGY_ROWS}, λ for ", "strategies, "), (" of best-single cost", " cost"),
           ("best-single accuracy", "best accuracy"))


def _number(v) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def _short_name(name: str) -> str:
    for long, short in SHORTER:
        name = name.replace(long, short)
    return name


def first_screen_rows(headline: Iterable[Mapping]) -> list[Mapping]:
    """The headline rows a terminal's first screen shows: the strategy rows, best single, cheapest and oracle, in
    the headline's order."""
    return [r for r in headline if str(r["routing"]).startswith(STRATEGY_ROWS) or r["routing"] in REFERENCE_ROWS]


def print_first_screen(console: Console, headline, report: str | Path) -> None:
    """The headline in the columns an 80-column terminal holds: accuracy with its 95% interval, $ per million queries,
    savings against the best single model and the accuracy difference from it (paired; n.s. when its interval holds
    0), at the precision report.md gives them; then where the whole table is.

    `headline`: the DataFrame `headline(ev)` of evaluation/report/tables.py, or metrics.json's "headline" list."""
    records = headline.to_dict(orient="records") if hasattr(headline, "to_dict") else list(headline)
    best = next((r for r in records if r["routing"] == "best single model"), None)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    table.add_column("routing", overflow="fold")
    table.add_column("accuracy [95% CI]", no_wrap=True)
    table.add_column("$/M", justify="right", no_wrap=True)
    table.add_column("savings", justify="right", no_wrap=True)
    table.add_column("Δ vs best", justify="right", no_wrap=True)
    for r in first_screen_rows(records):
        acc, lo, hi = _number(r["accuracy"]), _number(r.get("accuracy_ci_low")), _number(r.get("accuracy_ci_high"))
        saved = _number(r.get("savings_vs_best"))
        table.add_row(
            REFERENCE_ROWS.get(r["routing"]) or _short_name(r["routing"]),
            f"{acc:.3f}" + (f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else ""),
            f"{r['usd_per_million']:,.0f}",
            "" if saved is None else f"{saved:.1%}",
            _delta(r, best),
        )
    console.print(table)
    notes = ["strategies: λ for the best single's accuracy, or for ≤ 20% / ≤ 10% / ≤ 100% of its cost",
             "Δ vs best: accuracy − best single's (paired); n.s.: its 95% interval holds 0"]
    if best is not None and best.get("tau"):
        notes.append(f"best single: {best['tau']}")
    notes.append(f"every row and column (the router alone, baselines, latency): {report}")
    for note in notes:
        console.print(note, highlight=False, markup=False)


def _delta(r: Mapping, best: Mapping | None) -> str:
    if best is None or r is best:
        return "reference" if r is best else ""
    d = float(r["accuracy"]) - float(best["accuracy"])
    lo, hi = _number(r.get("delta_accuracy_ci_low")), _number(r.get("delta_accuracy_ci_high"))
    return f"{d:+.3f}" + (" n.s." if lo is not None and hi is not None and lo <= 0 <= hi else "")
