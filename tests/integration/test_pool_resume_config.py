"""Resuming the pool runner after a config change: the store is keyed by request hash, so a changed request is sent again.

    .venv/bin/python -m pytest -q tests/integration/test_pool_resume_config.py
"""

from __future__ import annotations

import pytest

from data.pool_runner import run_pool
from data.replay.serve import ReplayServer, build_state
from tests.integration.conftest import pool_at, sample_examples
from tests.integration.conftest import SECRET

pytestmark = pytest.mark.integration


def test_a_changed_temperature_sends_that_models_calls_again(tmp_path, keys, bfcl_examples, pool_recordings,
                                                             default_pool):
    state = build_state(None, bfcl_examples, pool=default_pool, recordings=pool_recordings, api_key=SECRET)
    sample = sample_examples(bfcl_examples, state.recordings, per_category=1, pairs=1)
    store = tmp_path / "calls.sqlite"
    with ReplayServer(state) as srv:
        pool = pool_at(default_pool, srv.base_url)
        first = run_pool(pool, sample, store, progress=False)
        assert first.complete and first.calls_made == len(pool.models) * len(sample)
        changed = pool.model_copy(update={"models": [m.model_copy(update={"temperature": 0.7}) if i == 0 else m
                                                     for i, m in enumerate(pool.models)]})
        again = run_pool(changed, sample, store, progress=False)
        # Only the changed model's requests differ: those, and nothing else, are sent again.
        assert again.complete and again.calls_made == len(sample)
        requests, _ = state.counts()
        resent = {m for (m, _), n in requests.items() if n == 2}
        assert resent == {pool.models[0].recording}
        assert run_pool(changed, sample, store, progress=False).calls_made == 0  # and then it is stored
