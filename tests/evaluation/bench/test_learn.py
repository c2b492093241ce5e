"""`switchcraft bench learn`: a 2,000-request synthetic log (5% explored) through the gateway's writer, `learn` on
it, the table of every stage's seconds and peak memory and its .json written (the shape only: no timing asserted).

    .venv/bin/python -m pytest -q tests/evaluation/bench/test_learn.py
"""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from switchcraft.cli_bench import register_bench

STAGES = ["read log", "consensus labels", "train", "strategy policy", "export", "compare on held-out requests"]


@pytest.mark.slow
def test_bench_learn_times_and_measures_every_stage_on_a_tiny_log(tmp_path):
    bench = typer.Typer()
    register_bench(bench)
    out = tmp_path / "bench_learn.md"
    res = CliRunner().invoke(bench, ["learn", "--requests", "2000", "--out", str(out), "--max-mb", "1",
                                     "--set", "frozen.epochs=20", "--set", "lexical.enabled=false"])
    assert res.exit_code == 0, res.output
    result = json.loads(out.with_suffix(".json").read_text())
    assert result["log"]["requests"] == 2000 and result["log"]["files"] >= 2
    assert 1900 < result["requests"] <= 2000 and 60 < result["complete"] < 160  # ~5% explored
    assert result["train"] + result["holdout"] == result["complete"]
    assert list(result["seconds"]) == STAGES == list(result["peak_mb"]) == list(result["start_mb"])
    assert all(s > 0 for s in result["seconds"].values()) and all(mb > 50 for mb in result["peak_mb"].values())
    assert all(result["start_mb"][s] <= result["peak_mb"][s] for s in STAGES)
    assert result["encoder_device"] == "cpu" and result["label_workers"] == 1  # below PARALLEL_LABELS
    table = out.read_text()
    for stage in STAGES:
        assert f"| {stage} | " in table
    learned = json.loads((tmp_path / "bench_learn_work" / "learned" / "learn.json").read_text())
    assert learned["peak_rss_mb"] == result["peak_mb"] and (tmp_path / "bench_learn_work" / "learned" /
                                                            "router_onnx" / "router.json").exists()


def test_bench_learn_refuses_a_share_outside_0_1(tmp_path):
    bench = typer.Typer()
    register_bench(bench)
    res = CliRunner().invoke(bench, ["learn", "--requests", "100", "--explore", "1.5", "--out",
                                     str(tmp_path / "b.md")])
    assert res.exit_code != 0 and "--explore 1.5" in res.output


def test_bench_learn_read_only_measures_the_streamed_and_the_whole_read(tmp_path):
    bench = typer.Typer()
    register_bench(bench)
    out = tmp_path / "bench_read.md"
    res = CliRunner().invoke(bench, ["learn", "--requests", "2000", "--out", str(out), "--read-only", "--whole-read"])
    assert res.exit_code == 0, res.output
    result = json.loads(out.with_suffix(".json").read_text())
    assert list(result["seconds"]) == ["read log", "read log, whole in memory (read_log)"] == list(result["peak_mb"])
    assert 60 < result["complete"] < 160 and "train" not in result
    assert '"read log, whole in memory (read_log)" is not part of `learn`' in out.read_text()
    assert not (tmp_path / "bench_read_work" / "learned").exists()
