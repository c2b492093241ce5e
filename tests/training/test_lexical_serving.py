"""The blended router served: training's numpy blend == PyTorch Router == ONNX Runtime client == Triton.

    .venv/bin/python -m pytest tests/training/test_lexical_serving.py -q            # Triton part: -m integration

A tiny random encoder with MiniLM's real tokenizer (tests/routers.py's
router) gets a lexical branch fitted on real packed BFCL v1 requests; the
probabilities the recipe computes for held-out rows (head logits blended with
`LexicalModel.logits`, in numpy) must be what every serving path returns.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from serving.client import RouterClient
from tests.routers import bfcl_sample, build_tiny_router, decide_with
from training.export import RequestEncoder, export_router
from training.lexical import LexicalModel
from training.router import load_router, save_router


@pytest.fixture(scope="module")
def requests_(shared_data):
    examples = bfcl_sample(shared_data, 40)
    return [(e.messages, e.tools) for e in examples]


@pytest.fixture(scope="module")
def blended_dir(tmp_path_factory, shared_data, requests_):
    """The tiny router with a lexical branch (weight 0.4) over the first 6 of its 8 models."""
    out = build_tiny_router(tmp_path_factory.mktemp("blended") / "router", bfcl_sample(shared_data, 40))
    router = load_router(out)
    ids = [router.pack_request(m, t).ids for m, t in requests_]
    rng = np.random.default_rng(0)
    y = (rng.random((len(ids), 6)) < 0.7).astype(np.float32)
    y[:, 0] = [float(len(t) > 1) for _, t in requests_]  # something a word piece can tell
    lex = LexicalModel.fit(ids, y, np.ones_like(y, dtype=bool), special_ids=router.tokenizer.all_special_ids,
                           vocab_size=router.tokenizer.vocab_size, min_df=1, weight=0.4)
    info = {k: v for k, v in router.info.items() if k not in ("format", "head", "versions", "saved")}
    save_router(out, router.model, router.tokenizer, info, lexical=lex)
    return out


def training_blend(router_dir, requests) -> np.ndarray:
    """How the recipe computes a held-out row: numpy lexical logits blended with the head's, then temperature."""
    router = load_router(router_dir)
    lex = LexicalModel.load(router_dir, router.info["lexical"])
    feed = RequestEncoder(router.tokenizer, router.info).batch(requests)
    with torch.no_grad():
        head = router.model(torch.from_numpy(feed["metadata"]), input_ids=torch.from_numpy(feed["input_ids"]),
                            attention_mask=torch.from_numpy(feed["attention_mask"])).double().numpy()
    z = lex.blend(head, [router.pack_request(m, t).ids for m, t in requests]) / router.temperatures
    return 1.0 / (1.0 + np.exp(-z))


@pytest.fixture(scope="module")
def exported_blend(tmp_path_factory, blended_dir, requests_):
    info = json.loads((blended_dir / "router.json").read_text())
    out = tmp_path_factory.mktemp("blended_onnx") / "router_onnx"
    report = export_router(blended_dir, out, requests=requests_[:16], decide=decide_with(info), threads=1)
    return out, report


def test_pytorch_router_computes_the_training_blend(blended_dir, requests_):
    router = load_router(blended_dir)
    assert router.lexical is not None and router.info["lexical"]["n_models"] == 6
    expected = training_blend(blended_dir, requests_)
    got = np.stack([router.predict(messages=m, tools=t) for m, t in requests_])
    assert np.abs(got - expected).max() < 1e-6
    # the branch moves the first 6 models only, and it does move them
    plain = load_router(blended_dir)
    plain.net.lexical = None
    head_only = np.stack([plain.predict(messages=m, tools=t) for m, t in requests_])
    assert np.abs(head_only[:, 6:] - got[:, 6:]).max() < 1e-9 and np.abs(head_only[:, :6] - got[:, :6]).max() > 1e-3


def test_onnx_client_serves_the_training_blend(exported_blend, blended_dir, requests_):
    out, report = exported_blend
    assert report.max_abs_diff_fp32 < 1e-4 and report.decisions_equal_fp32 == 1.0
    client = RouterClient.from_dir(out, threads=1, max_batch_size=8)
    try:
        served = client.probabilities(requests_)
        assert np.abs(served - training_blend(blended_dir, requests_)).max() < 1e-4
        alone = np.concatenate([client.probabilities([r]) for r in requests_[:5]])
        assert np.abs(alone - served[:5]).max() < 1e-5  # padding in a batch changes nothing
    finally:
        client.close()


@pytest.mark.integration
def test_triton_serves_the_same_blend(exported_blend, requests_, tmp_path):
    from serving.triton import TritonServer, write_model_repository

    out, _ = exported_blend
    repo = write_model_repository(out, tmp_path / "model_repository", threads=1)
    local = RouterClient.from_dir(out, threads=1)
    with TritonServer(repo / "cpu", startup_timeout_s=90) as server:
        remote = RouterClient.from_dir(repo, backend="triton-http", url=server.http_url, timeout_s=10)
        try:
            assert np.abs(remote.probabilities(requests_) - local.probabilities(requests_)).max() < 1e-5
        finally:
            remote.close()
    local.close()
