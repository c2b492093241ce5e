"""`switchcraft learn` says which router to serve: "ready to serve" on a roll-out verdict, exit 3 and "keep the
router in service" on a keep (the job itself runs in tests/integration/test_learning_loop.py).

    .venv/bin/python -m pytest tests/switchcraft/test_cli_learn.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import evaluation.jobs.learn
from evaluation.jobs.learn import LearnResult
from switchcraft.cli import app


def result(verdict: dict, tmp_path: Path) -> LearnResult:
    side = {"accuracy_consensus": {"mean": 0.9, "low": 0.8, "high": 1.0}, "usd_per_million": 335.0}
    comparison = {"n": 12, "router_version": "tiny@abc", "in_service": side, "new": side,
                  "new_minus_in_service_consensus": {"mean": -0.1, "low": -0.25, "high": 0.0},
                  "new_minus_in_service_usd_per_million": {"mean": 52.0, "low": 11.0, "high": 95.0},
                  "rollout": verdict}
    return LearnResult(tmp_path, tmp_path / "router", tmp_path / "router_onnx", 40, 30, 10, None, comparison)


@pytest.mark.parametrize("verdict, code, words", [
    ({"verdict": "keep", "why": "dearer than the router in service: Δ $+52/M [+11, +95]"}, 3,
     "keep the router in service: the learned router is dearer than the router in service"),
    ({"verdict": "roll_out", "why": "neither less accurate nor dearer beyond the paired intervals"}, 0,
     "ready to serve (neither less accurate nor dearer"),
])
def test_the_verdict_decides_the_exit_status_and_the_words(verdict, code, words, tmp_path, monkeypatch):
    monkeypatch.setattr(evaluation.jobs.learn, "learn", lambda *a, **k: result(verdict, tmp_path))
    r = CliRunner().invoke(app, ["learn", "--from-log", str(tmp_path), "--run-dir", str(tmp_path)])
    assert r.exit_code == code, r.output
    assert words in " ".join(r.output.split())
    assert "$ / M: +52 [+11, +95]" in " ".join(r.output.split())


@pytest.mark.integration
def test_learn_reads_a_postgresql_log_by_its_url_and_never_shows_its_password(pg_log, default_pool, tmp_path):
    """The URL is read as a URL (not a path), every row of the log counts, and the password stays out of the
    message."""
    from serving.core.decision_log_pg import PostgresDecisionLog
    from tests.serving.test_decision_log_pg import records

    written = records(default_pool, 60, days=0.2, explore=0.1)
    log = PostgresDecisionLog(pg_log, keep_days=None)
    log.write(written)
    log.close()
    url = pg_log.replace("postgres@", "postgres:hunter2-pw@")  # trust authentication ignores it
    r = CliRunner().invoke(app, ["learn", "--from-log", url, "--run-dir", str(tmp_path), "--pool",
                                 str(Path(__file__).parents[2] / "configs" / "pool.yaml")])
    answered = sum(1 for _, req, _ in written if req is not None and req["status"] == 200)
    assert r.exit_code == 1 and f"of {answered} logged requests were answered by every pool model" in " ".join(
        r.output.split()), r.output
    assert "hunter2" not in r.output and "postgres:***@" in r.output
