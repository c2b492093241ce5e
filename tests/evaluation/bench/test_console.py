"""`switchcraft bench console`: a small synthetic log through the gateway's writer, every view's page timed for
each range through the real console app, the table and its .json written (the shape only: no timing asserted).

    .venv/bin/python -m pytest -q tests/evaluation/bench/test_console.py
"""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from evaluation.bench.console import RANGES, VIEWS
from evaluation.harness import postgres_missing
from switchcraft.cli_bench import register_bench


@pytest.mark.parametrize("log", ["sqlite", pytest.param("postgres", marks=pytest.mark.skipif(
    bool(postgres_missing()), reason=postgres_missing() or ""))])
def test_bench_console_writes_a_table_of_every_view_and_range(exported, tmp_path, log):
    bench = typer.Typer()
    register_bench(bench)
    out = tmp_path / "bench_console.md"
    res = CliRunner().invoke(bench, ["console", "--requests", "2000", "--days", "3", "--out", str(out),
                                     "--router", str(exported[0]), "--repeat", "1", "--explore", "0.05",
                                     "--log", log])
    assert res.exit_code == 0, res.output
    table = out.read_text().splitlines()
    header = next(i for i, line in enumerate(table) if line.startswith("| range"))
    assert table[header] == "| range (requests in it) | Savings | Quality | Traffic | Keys | Requests | Router |"
    rows = table[header + 2: header + 2 + len(RANGES)]
    assert [r.split(" ")[1] for r in rows] == list(RANGES) and rows[-1].startswith("| all (2,000) |")
    for r in rows:
        cells = [c.strip() for c in r.strip("|").split("|")][1:]
        assert len(cells) == len(VIEWS) and all(float(c) >= 0 for c in cells)
    result = json.loads(out.with_suffix(".json").read_text())
    assert result["log"]["requests"] == 2000 and result["log"]["summary"] > 0
    assert result["in_range"]["all"] == 2000 and 0 < result["in_range"]["24h"] < 2000
    assert len(result["rows"]) == len(RANGES) * len(VIEWS) and all(r["bytes"] > 1000 for r in result["rows"])
    assert "Load average" in out.read_text()
    assert ("Log (PostgreSQL)" in out.read_text()) == (log == "postgres") and not list(tmp_path.glob("*_log")) == (
        log == "sqlite")  # the SQLite log's files, or none: PostgreSQL held it


def test_screenshots_without_a_browser_say_what_to_install(monkeypatch, tmp_path):
    import evaluation.harness as browser
    from evaluation.bench.console import screenshots

    monkeypatch.setattr(browser, "chromium", lambda: (None, None))
    said = screenshots(None, tmp_path / "img")
    assert "apt-get install chromium chromium-driver" in said and not (tmp_path / "img").exists()


def test_bench_console_names_an_unknown_log(exported, tmp_path):
    bench = typer.Typer()
    register_bench(bench)
    res = CliRunner().invoke(bench, ["console", "--requests", "10", "--out", str(tmp_path / "b.md"), "--router",
                                     str(exported[0]), "--log", "mysql"])
    assert res.exit_code != 0 and "--log 'mysql': give sqlite or postgres" in res.output
