"""The whole loop on loopback: the gateway serves BFCL v1 traffic with the decision log and exploration on, a model
is added to the pool file partway, `switchcraft learn` makes a new router from the log's consensus labels, the
running gateway reloads it, and the next queries are scored with the verifier's true labels.

    .venv/bin/python -m pytest -q tests/integration/test_learning_loop.py

Small on purpose (CI): 90 requests to learn from, 60 to score. `switchcraft bench loop` runs it at full size.
"""

from __future__ import annotations

import json

import pytest

from data.pool import load_pool
from evaluation.jobs.loop import run_loop
from tests.routers import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow]
FAST_TRAIN = ["frozen.epochs=60", "lexical.enabled=false"]


def test_serve_log_explore_learn_reload_score(exported, shared_data, tmp_path):  # noqa: F811
    added = next(m for m in load_pool(REPO / "configs" / "pools" / "mixed_open_weight.yaml").models
                 if m.name == "llama-3-70b-instruct")
    res = run_loop(exported[0], shared_data, tmp_path, pool_path=REPO / "configs" / "pool.yaml", requests=90,
                   score_n=60, add_model=added, add_after=0.2, train_overrides=FAST_TRAIN,
                   budget_usd_per_million=1000.0)
    # Exploration asked the model added mid-stream on every request after it joined (it was new).
    assert res.added_model_answers >= 70
    # The learned router was loaded into the running gateway and answers every scored request.
    old, new = res.router_versions
    assert old != new and res.after["answered"] == res.after["n"] == 60
    # It routes over the new pool (the added model is one of its choices) ...
    learned = res.learn
    assert learned["n"] >= 10 and learned["new"]["accuracy_consensus"]["mean"] is not None
    # Its strategy policy was fitted to the budget given in USD, not to a share of a consensus-ranked model.
    policy = json.loads((tmp_path / "learned" / "router" / "router.json").read_text())["strategy_policy"]
    assert policy["target"] == "budget 1000 USD per million requests", policy["target"]
    # ... and on true labels it is no worse than the random tiny router that was in service, at 95%.
    assert res.after["accuracy_ci"][1] >= res.before["accuracy"], (res.before, res.after)
    assert res.after["accuracy"] >= 0.7, res.after
