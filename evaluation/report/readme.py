"""The README's headline table from a run's `metrics.json`, and the check that the README still says it.

    switchcraft readme-table runs/default                    # print the table's rows (markdown)
    switchcraft readme-table runs/default --check README.md  # exit 1, naming each row, where the README differs

The table is the few rows a reader compares (`ROWS`, in order, bold for the first two); every other row stays in
report.md. The figures are formatted from metrics.json exactly as the README prints them, so a README that drifts
from the run it quotes fails the check.
"""

from __future__ import annotations

import json
from pathlib import Path

# (row name in metrics.json's headline, the README's label); None: the label is the name.
ROWS: tuple[tuple[str, str | None], ...] = (
    ("switchcraft strategies, λ for ≤ 100% of best-single cost", None),
    ("switchcraft strategies, λ for best-single accuracy", None),
    ("switchcraft strategies, λ for ≤ 20% of best-single cost", None),
    ("switchcraft strategies, λ for ≤ 10% of best-single cost", None),
    ("best fixed strategy on training folds, for best-single accuracy",
     "best fixed strategy on training folds (best-single accuracy)"),
    ("switchcraft router, λ rule (λ for best-single accuracy)", "switchcraft router alone, λ rule, for best-single accuracy"),
    ("category prior (reference: BFCL category known), λ rule (λ for best-single accuracy)",
     "category prior (the BFCL category known), λ for best-single accuracy"),
    ("best single model", None),
    ("cheapest model", None),
    ("oracle", None),
)
BOLD = 2  # the first rows, in bold
HEADER = ("| routing | accuracy [95% CI] | $ / M queries [95% CI] | savings | Δ accuracy vs best single [95% CI] |\n"
          "|---|---|---|---:|---|")


def _signed(v: float) -> str:
    return f"{v:+.3f}".replace("-", "−")


def readme_rows(metrics: dict) -> list[str]:
    """The table's rows, formatted as the README prints them."""
    head = {r["routing"]: r for r in metrics["headline"]}
    missing = [name for name, _ in ROWS if name not in head]
    if missing:
        raise ValueError(f"metrics.json has no headline row {missing[0]!r} (rows: {sorted(head)})")
    best = head["best single model"]
    out = []
    for i, (name, label) in enumerate(ROWS):
        r = head[name]
        label = label or name
        if name == "best single model" and best.get("tau"):
            label = f"best single model ({best['tau']})"
        if name == "cheapest model":
            label = f"cheapest model ({_cheapest(metrics)})"
        cells = [label,
                 f"{r['accuracy']:.3f} [{r['accuracy_ci_low']:.3f}, {r['accuracy_ci_high']:.3f}]",
                 f"{r['usd_per_million']:,.0f} [{r['usd_per_million_ci_low']:,.0f}, {r['usd_per_million_ci_high']:,.0f}]",
                 f"{r['savings_vs_best']:.0%}",
                 "reference" if name == "best single model" else
                 f"{_signed(r['accuracy'] - best['accuracy'])} [{_signed(r['delta_accuracy_ci_low'])}, "
                 f"{_signed(r['delta_accuracy_ci_high'])}]"]
        if i < BOLD:
            cells = [f"**{c}**" for c in cells]
        out.append("| " + " | ".join(cells) + " |")
    return out


def _cheapest(metrics: dict) -> str:
    singles = metrics.get("singles") or []
    return min(singles, key=lambda s: s["usd_per_million"])["model"] if singles else "?"


def table(run_dir: str | Path) -> str:
    return "\n".join([HEADER, *readme_rows(_metrics(run_dir))])


def check(readme: str | Path, run_dir: str | Path) -> list[str]:
    """The rows of the run's table that the README does not hold verbatim (empty: it says what the run says)."""
    text = Path(readme).read_text(encoding="utf-8")
    return [row for row in readme_rows(_metrics(run_dir)) if row not in text]


def _metrics(run_dir: str | Path) -> dict:
    path = Path(run_dir) / "report" / "metrics.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no report here; run `switchcraft reproduce --run-dir {run_dir}` first") from None
