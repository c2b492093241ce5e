"""The novelty index: fitted held out on real BFCL v1 requests, it flags at most 2% of them and an agent harness's
request; the router client sends a flagged request to the safe model and says so.

    .venv/bin/python -m pytest tests/training/test_novelty.py -q
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.routers import agent_request, with_novelty
from training.folds import grouped_folds
from training.novelty import Novelty

@pytest.fixture(scope="module")
def encoded(exported, bfcl_examples):
    """Every BFCL v1 request as the exported router's client encodes it (ids, standardised metadata)."""
    from training.export import RequestEncoder

    encoder = RequestEncoder.from_dir(exported[0])
    return encoder, [encoder.encode(e.messages, e.tools) for e in bfcl_examples], [e.id for e in bfcl_examples]


@pytest.fixture(scope="module")
def fitted(encoded):
    _, rows, groups = encoded
    ids, meta = [r[0] for r in rows], np.array([r[1] for r in rows])
    return Novelty.fit(ids, meta, grouped_folds(groups, 5, 0), safe_model="gpt-4o-2024-08-06-FC")


def test_flags_at_most_two_percent_held_out_and_an_agent_harness_request(encoded, fitted):
    encoder, rows, _ = encoded
    assert len(rows) == 1630 and 0.015 <= fitted.held_out_flagged <= 0.02
    agent = fitted.parts(*encoder.encode(*agent_request()))
    assert agent["score"] > fitted.threshold, agent
    assert agent["metadata"] > fitted.meta_scale  # far outside benchmark questions in length and tools
    assert fitted.score(*rows[7]) < fitted.threshold and fitted.parts(*rows[7])["text"] == pytest.approx(0.0, abs=1e-6)


def test_saved_and_loaded_it_scores_the_same(encoded, fitted, tmp_path):
    encoder, rows, _ = encoded
    fitted.save(tmp_path)
    again = Novelty.load(tmp_path, fitted.info())
    for ids, meta in [encoder.encode(*agent_request()), rows[0], rows[999]]:
        assert again.parts(ids, meta) == pytest.approx(fitted.parts(ids, meta))
    assert again.threshold == fitted.threshold and again.safe_model == fitted.safe_model
    with pytest.raises(FileNotFoundError, match="novelty index that is not there"):
        Novelty.load(tmp_path / "elsewhere", fitted.info())


def test_fitting_needs_two_folds_and_one_row_each():
    with pytest.raises(ValueError, match="at least two folds"):
        Novelty.fit([[1, 2], [3, 4]], np.zeros((2, 3)), np.array([0, 0]), safe_model="m")
    with pytest.raises(ValueError, match="2 rows of ids, 1 of metadata"):
        Novelty.fit([[1, 2], [3, 4]], np.zeros((1, 3)), np.array([0, 1]), safe_model="m")


@pytest.fixture(scope="module")
def novel_router(exported, fitted, tmp_path_factory):
    return with_novelty(exported[0], fitted, tmp_path_factory.mktemp("novel") / "router_onnx")


def test_the_client_sends_a_flagged_request_to_the_safe_model_and_says_so(novel_router, bfcl_requests):
    from serving.client import RouterClient
    from serving.policy import Constraints

    client = RouterClient.from_dir(novel_router, threads=1)
    try:
        routed = client.route(*agent_request())
        d = routed.decision
        assert d.chosen == "gpt-4o-2024-08-06-FC" and d.strategy.first == ("gpt-4o-2024-08-06-FC",)
        assert d.ranking[0] == d.chosen and sorted(d.ranking) == sorted(client.models)
        assert d.novelty["flagged"] and d.novelty["applied"] and d.strategy_why["rule"] == "novelty"
        assert routed.to_dict()["novelty"]["safe_model"] == "gpt-4o-2024-08-06-FC"
        # A caller's own τ, or constraints that exclude the safe model, keep the router's decision (and say so).
        assert not client.route(*agent_request(), threshold=0.5).decision.novelty["applied"]
        barred = client.route(*agent_request(), Constraints(allowed_models=["gpt-4o-mini-2024-07-18"])).decision
        assert barred.chosen == "gpt-4o-mini-2024-07-18" and "excluded" in barred.novelty["why"]
        # Benchmark requests like the training ones are routed as before.
        plain = [client.route(m, t).decision for m, t in bfcl_requests]
        assert sum(p.novelty["applied"] for p in plain) <= 0.1 * len(plain)
    finally:
        client.close()
    off = RouterClient.from_dir(novel_router, threads=1, novelty=False)
    try:
        assert off.novelty is None and off.route(*agent_request()).decision.novelty is None
    finally:
        off.close()


def test_export_and_the_triton_repository_carry_the_index(novel_router, tmp_path):
    from serving.triton import write_model_repository
    from training.export import copy_novelty

    info = json.loads((novel_router / "router.json").read_text())
    (tmp_path / "copy").mkdir()
    copy_novelty(novel_router, tmp_path / "copy", info)
    assert (tmp_path / "copy" / "novelty.npz").read_bytes() == (novel_router / "novelty.npz").read_bytes()
    repo = write_model_repository(novel_router, tmp_path / "model_repository", threads=1)
    assert Novelty.load(repo, json.loads((repo / "router.json").read_text())["novelty"]).threshold == \
        info["novelty"]["threshold"]
