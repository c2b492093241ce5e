"""The first screen of `switchcraft reproduce`: the headline cut to what an 80-column terminal holds.

    .venv/bin/python -m pytest -q tests/switchcraft/test_tables.py
"""

from __future__ import annotations

from rich.console import Console

from switchcraft.tables import print_first_screen
from tests.headlines import METRICS


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
