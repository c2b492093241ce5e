"""Shared pieces of the pool integration tests: real BFCL v1 examples, the default pool, a sample.

.venv/bin/python -m pytest -q tests/integration
"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from data.pool import Pool
from data.schema import Example

REPO = Path(__file__).resolve().parents[2]


SECRET = "sk-test-0123456789abcdef-never-log-me"  # every pool model's key in these tests: never in an output


@pytest.fixture
def keys(monkeypatch, default_pool):
    for m in default_pool.models:
        monkeypatch.setenv(m.api_key_env, SECRET)


def sample_examples(
    examples: list[Example], recordings, *, per_category: int = 2, pairs: int = 3
) -> list[Example]:
    """A small sample that still covers the hard cases: every category, questions asked twice
    (told apart only by the functions offered), and recordings that mix text and calls."""
    by_cat = collections.defaultdict(list)
    for ex in examples:
        by_cat[ex.category].append(ex)
    chosen = {ex.id: ex for cat in sorted(by_cat) for ex in by_cat[cat][:per_category]}
    by_q = collections.defaultdict(list)
    for ex in examples:
        by_q[ex.question].append(ex)
    for twins in [v for v in by_q.values() if len(v) > 1][:pairs]:
        chosen.update((ex.id, ex) for ex in twins)
    ids = {ex.id: ex for ex in examples}
    mixed = [
        i
        for i, r in recordings.get("gemini-1.5-flash-preview-0514", {}).items()
        if isinstance(r.raw, list)
        and any(isinstance(x, str) for x in r.raw)
        and any(isinstance(x, dict) for x in r.raw)
    ]
    chosen.update((i, ids[i]) for i in sorted(mixed)[:2])
    return list(chosen.values())


def pool_at(pool: Pool, base_url: str, **overrides) -> Pool:
    """The same pool, every model pointed at `base_url` (a replay server), no RPM pacing."""
    models = [
        m.model_copy(update={"base_url": base_url, "requests_per_minute": None, **overrides})
        for m in pool.models
    ]
    return pool.model_copy(update={"models": models})
