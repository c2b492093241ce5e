"""Runner pieces that need no server: API keys from the environment, progress bars with spend.

.venv/bin/python -m pytest -q tests/data/pool_runner/test_units.py
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from data.errors import DataError
from data.pool import Pool
from data.pool_runner.progress import PoolProgress
from data.pool_runner.runner import api_keys


def _pool(**m) -> Pool:
    return Pool.model_validate(
        {"models": [{"name": "a", "prices": {"input_per_mtok": 1, "output_per_mtok": 1}, **m}]}
    )


def test_missing_key_names_the_variable_never_a_value(monkeypatch):
    monkeypatch.delenv("SWITCHCRAFT_TEST_KEY", raising=False)
    with pytest.raises(DataError, match=r"SWITCHCRAFT_TEST_KEY \(for a\)"):
        api_keys(_pool(api_key_env="SWITCHCRAFT_TEST_KEY"))
    monkeypatch.setenv("SWITCHCRAFT_TEST_KEY", "sk-secret-value")
    assert api_keys(_pool(api_key_env="SWITCHCRAFT_TEST_KEY")) == {"a": "sk-secret-value"}
    assert api_keys(_pool()) == {"a": None}


def test_progress_shows_count_and_spend_per_model():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=160)
    with PoolProgress({"gpt-x": 3, "claude-y": 2}, enabled=True, console=console) as bars:
        bars.done("gpt-x", 0.0125)
        bars.done("gpt-x", 0.0100)
        bars.failed("claude-y")
    text = buf.getvalue()
    assert "gpt-x" in text and "2/3" in text and "$0.0225" in text and "1 failed" in text
