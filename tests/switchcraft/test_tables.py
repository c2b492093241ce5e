"""The first screen of `switchcraft reproduce`: the headline cut to what an 80-column terminal holds.

    .venv/bin/python -m pytest -q tests/switchcraft/test_tables.py
"""

from __future__ import annotations

from rich.console import Console

from switchcraft.tables import print_first_screen


def _row(name, acc, lo, hi, usd, saved, dlo, dhi, tau=None):
    return {"routing": name, "accuracy": acc, "accuracy_ci_low": lo, "accuracy_ci_high": hi, "usd_per_million": usd,
            "usd_per_million_ci_low": usd * 0.9, "usd_per_million_ci_high": usd * 1.1, "savings_vs_best": saved,
            "gap_closed": 0.1, "vs_best_single": "accuracy n.s., cheaper", "delta_accuracy_ci_low": dlo,
            "delta_accuracy_ci_high": dhi, "latency_p50_s": 0.52, "latency_p95_s": 1.25, "calls_per_request": 1.4,
            "escalation_rate": 0.12, "tau": tau, "aiq": None, "apgr": None}


METRICS = {"headline": [
    _row("switchcraft strategies, λ for best-single accuracy", 0.911, 0.898, 0.925, 548.2, 0.7402, -0.011, 0.006, "λ 0.01"),
    _row("switchcraft strategies, λ for ≤ 20% of best-single cost", 0.917, 0.903, 0.930, 398.4, 0.8113, -0.006, 0.01),
    _row("switchcraft strategies, λ for ≤ 10% of best-single cost", 0.908, 0.894, 0.922, 187.9, 0.911, -0.015, 0.002),
    _row("best fixed strategy on training folds, for best-single accuracy", 0.92, 0.907, 0.933, 402.0, 0.81, -0.003,
         0.012),
    _row("switchcraft router (τ for best-single accuracy)", 0.912, 0.898, 0.925, 1725.3, 0.18, -0.01, 0.005, "0.41"),
    _row("category prior (reference: BFCL category known), λ rule (λ for best-single accuracy)", 0.913, 0.899, 0.926,
         1311.0, 0.38, -0.01, 0.006),
    _row("best single model", 0.915, 0.902, 0.928, 12110.0, 0.0, 0.0, 0.0, "claude-3-5-sonnet-20240620"),
    _row("cheapest model", 0.826, 0.807, 0.845, 68.0, 0.968, -0.11, -0.07),
    _row("oracle", 0.969, 0.961, 0.978, 158.0, 0.925, 0.045, 0.063),
    {"routing": "random (10 seeds)", "accuracy": 0.85, "usd_per_million": 900.0, "savings_vs_best": 0.57,
     "gap_closed": float("nan")},
]}


def _screen(width: int = 80) -> list[str]:
    console = Console(width=width, record=True, color_system=None)
    print_first_screen(console, METRICS["headline"], "runs/default/report/report.md")
    return console.export_text().splitlines()


def test_first_screen_fits_80_columns():
    lines = _screen()
    assert lines and max(len(line.rstrip()) for line in lines) <= 80, "\n".join(lines)


def test_first_screen_has_the_strategy_and_reference_rows_at_report_precision():
    lines = _screen()
    row = {line.split("  ")[0].strip(): line for line in lines if "[0." in line}
    assert list(row) == ["strategies, best accuracy", "strategies, ≤ 20% cost", "strategies, ≤ 10% cost",
                         "best single", "cheapest", "oracle"]
    assert row["strategies, ≤ 20% cost"].split()[-7:] == ["0.917", "[0.903,", "0.930]", "398", "81.1%", "+0.002", "n.s."]
    assert row["best single"].split()[-3:] == ["12,110", "0.0%", "reference"]
    assert row["cheapest"].split()[-2:] == ["96.8%", "-0.089"]  # its paired interval excludes 0: no n.s.
    text = "\n".join(lines)
    assert "router" not in text.split("every row")[0] and "random" not in text
    assert "claude-3-5-sonnet-20240620" in text and "runs/default/report/report.md" in text


def test_first_screen_takes_the_headline_dataframe_too():
    import pandas as pd

    console = Console(width=80, record=True, color_system=None)
    print_first_screen(console, pd.DataFrame(METRICS["headline"]), "report.md")
    assert "oracle" in console.export_text()
