"""The README's headline table from a run's metrics.json, and the check that fails when the README drifts.

    .venv/bin/python -m pytest -q tests/evaluation/report/test_readme.py
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from evaluation.report import readme
from switchcraft.cli import app
from tests.headlines import headline_row


@pytest.fixture()
def run(tmp_path):
    rows = [headline_row(name, 0.85 + i / 100, 0.84 + i / 100, 0.86 + i / 100, 100.0 * (i + 1), 0.5, -0.01, 0.02)
            for i, (name, _) in enumerate(readme.ROWS)]
    rows[7]["tau"] = "qwen3-32b"
    metrics = {"headline": rows, "singles": [{"model": "a", "usd_per_million": 9.0}, {"model": "b", "usd_per_million": 3.0}]}
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "metrics.json").write_text(json.dumps(metrics))
    return tmp_path


def test_the_table_names_the_best_and_cheapest_models_and_signs_each_difference(run):
    text = readme.table(run)
    lines = text.splitlines()
    assert lines[0] == readme.HEADER.splitlines()[0] and len(lines) == 2 + len(readme.ROWS)
    assert lines[2].startswith("| **switchcraft strategies, λ for ≤ 100% of best-single cost** | **0.850 [0.840, 0.860]**")
    assert "| best single model (qwen3-32b) | 0.920 [0.910, 0.930] | 800 [720, 880] | 50% | reference |" in text
    assert "| cheapest model (b) |" in text
    assert "| **−0.070 [−0.010, +0.020]** |" in lines[2]  # accuracy − the best single's, with the paired interval


def test_the_check_names_each_row_the_readme_no_longer_holds(run, tmp_path):
    good = tmp_path / "README.md"
    good.write_text("# x\n\n" + readme.table(run) + "\n")
    assert readme.check(good, run) == []
    res = CliRunner().invoke(app, ["readme-table", str(run), "--check", str(good)])
    assert res.exit_code == 0 and "holds every row" in " ".join(res.output.split())
    good.write_text(good.read_text().replace("0.920 [0.910, 0.930]", "0.921 [0.910, 0.930]"))
    assert [r.split(" |")[0] for r in readme.check(good, run)] == ["| best single model (qwen3-32b)"]
    res = CliRunner().invoke(app, ["readme-table", str(run), "--check", str(good)])
    out = " ".join(res.output.split())
    assert res.exit_code == 1 and "does not hold 1 row(s)" in out and "best single model" in out


def test_a_run_without_a_report_says_how_to_make_one(tmp_path):
    res = CliRunner().invoke(app, ["readme-table", str(tmp_path / "nope")])
    assert res.exit_code == 1 and "switchcraft reproduce --run-dir" in res.output


def test_the_best_single_row_names_each_folds_model():
    import numpy as np

    from evaluation.report.tables import per_fold

    models = ["gpt-4o", "qwen3-32b", "o3"]
    folds = np.repeat(np.arange(5), 3)
    choice = np.repeat([1, 1, 0, 1, 1], 3)  # qwen3-32b chosen on four folds' training rows, gpt-4o on one
    assert per_fold(choice, folds, models) == "qwen3-32b on 4 of 5 folds, gpt-4o on 1"
    assert per_fold(np.repeat([2, 2, 2, 2, 2], 3), folds, models) == "o3 on every fold"
    assert per_fold(np.zeros(4, int), np.zeros(4, int), models) == "gpt-4o"  # one fold: its model
