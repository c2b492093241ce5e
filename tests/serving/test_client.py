"""RouterClient in-process (ONNX Runtime): decisions equal the PyTorch router's, batching, constraints, errors.

    .venv/bin/python -m pytest tests/serving/test_client.py -q
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from serving.backends import BackendError, TritonGrpcBackend, TritonHttpBackend, make_backend
from serving.client import RouterClient, policy_from_info
from serving.policy import Constraints, NoEligibleModel
from evaluation.harness import free_port
from tests.serving.helpers import with_strategy_policy


@pytest.fixture(scope="module")
def client(exported):
    out, _ = exported
    c = RouterClient.from_dir(out, threads=1, max_batch_size=4)
    yield c
    c.close()


def test_route_equals_the_pytorch_router_decision(client, tiny_router_dir, bfcl_requests):
    from training.router import load_router

    router = load_router(tiny_router_dir)
    policy = policy_from_info(router.info)
    for messages, tools in bfcl_requests:
        expected = policy.decide(router.predict(messages=messages, tools=tools))
        got = client.route(messages, tools)
        assert got.decision.chosen == expected.chosen and got.decision.ranking == expected.ranking
        assert got.decision.rule == expected.rule
        for m, p in expected.probabilities.items():
            assert got.decision.probabilities[m] == pytest.approx(p, abs=1e-4)
        assert got.latency_ms > 0 and got.backend == "ort" and got.router_version.startswith("tiny-bert@")
        assert 4 < got.n_tokens <= 256


def test_batches_of_mixed_lengths_equal_one_at_a_time(client, bfcl_requests, exported):
    together = client.probabilities(bfcl_requests)  # 16 requests in batches of 4, sorted by length
    alone = np.concatenate([client.probabilities([r]) for r in bfcl_requests])
    assert together.shape == (16, 8) and np.abs(together - alone).max() < 1e-5
    padded = RouterClient.from_dir(exported[0], threads=1, pad_multiple=64)
    assert np.abs(padded.probabilities(bfcl_requests) - together).max() < 1e-5
    assert client.probabilities([]).shape == (0, 8)
    batch = client.route_batch(bfcl_requests[:3])
    assert [d.decision.chosen for d in batch] == [client.route(m, t).decision.chosen for m, t in bfcl_requests[:3]]


def test_constraints_and_thresholds_reach_the_policy(client, bfcl_requests):
    messages, tools = bfcl_requests[0]
    only = client.route(messages, tools, Constraints(allowed_models=frozenset({"gpt-4-0613"})))
    assert only.decision.chosen == "gpt-4-0613" and len(only.decision.excluded) == 7
    strict = client.route(messages, tools, threshold=0.9999)
    assert strict.decision.rule == "most_probable" and strict.decision.threshold == 0.9999
    with pytest.raises(NoEligibleModel):
        client.route(messages, tools, Constraints(allowed_models=frozenset({"nobody"})))


def test_int8_client_and_clear_errors(exported, tmp_path):
    out, _ = exported
    q = RouterClient.from_dir(out, int8=True, threads=1)
    assert q.backend.name == "ort-int8"
    with pytest.raises(FileNotFoundError, match="no router.json"):
        RouterClient.from_dir(tmp_path)
    with pytest.raises(ValueError, match="unknown backend 'tpu'"):
        make_backend("tpu")
    with pytest.raises(ValueError, match="without a scheme"):
        TritonHttpBackend("http://127.0.0.1:1")


@pytest.mark.parametrize("cls", [TritonHttpBackend, TritonGrpcBackend])
def test_triton_backend_down_fails_fast_and_says_where(cls, bfcl_requests, client):
    backend = cls(f"127.0.0.1:{free_port()}", timeout_s=0.5)
    assert backend.ready() is False
    feed = client.encoder.batch(bfcl_requests[:1])
    t0 = time.monotonic()
    with pytest.raises(BackendError, match=r"triton-(http|grpc) 127\.0\.0\.1"):
        backend.infer(feed)
    assert time.monotonic() - t0 < 5
    backend.close()


def test_strategy_policy_in_router_json_chooses_the_cascade_within_constraints(exported, bfcl_requests, tmp_path):
    path, models = with_strategy_policy(exported, tmp_path)
    c = RouterClient.from_dir(path, threads=1)
    try:
        messages, tools = bfcl_requests[0]
        d = c.route(messages, tools).decision
        assert d.strategy.kind == "agree" and d.strategy.first == (models[0], models[1])
        assert d.strategy.escalate[0] == models[2] and set(d.strategy.models) == set(models)  # the rest as fallbacks
        assert d.strategy_why["rule"] == "strategy_lambda" and d.to_dict()["strategy"]["kind"] == "agree"
        # allowed_models without the cascade's models: the single strategy on the menu.
        d = c.route(messages, tools, Constraints(allowed_models=frozenset({models[0]}))).decision
        assert d.strategy.kind == "single" and d.strategy.first == (models[0],)
        # min_probability asks for one model's confidence: the single decision stands.
        d = c.route(messages, tools, Constraints(min_probability=0.01)).decision
        assert d.strategy.kind == "single" and d.strategy_why["rule"] == "single"
        # A threshold in the request (router-<τ>) is the threshold rule, single model.
        assert c.route(messages, tools, threshold=0.5).decision.strategy.kind == "single"
    finally:
        c.close()
    off = RouterClient.from_dir(path, threads=1, strategies=False)
    try:
        assert off.strategy_policy is None and off.route(*bfcl_requests[0]).decision.strategy.kind == "single"
    finally:
        off.close()
