"""The category branch: P(category | request) from TF-IDF + metadata, mixed with per-category rates; served in-graph.

    .venv/bin/python -m pytest tests/training/test_category.py -q
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy import sparse

from tests.routers import training_blend
from training.category import CategoryModel


def _toy(n=120, seed=0):
    """Two categories told apart by one TF-IDF column and one metadata feature; model 0 fails in category "b"."""
    rng = np.random.default_rng(seed)
    cats = np.where(rng.random(n) < 0.5, "a", "b")
    x = sparse.csr_matrix(np.c_[(cats == "b") * 1.0, rng.random(n)])
    meta = np.c_[np.where(cats == "b", 1.0, -1.0) + rng.normal(0, 0.3, n), rng.normal(0, 1, n)]
    y = np.c_[cats == "a", np.ones(n, bool)].astype(np.float32)
    return x, meta, cats, y


def test_rates_are_each_categorys_training_success_smoothed_toward_the_overall_rate():
    x, meta, cats, y = _toy()
    mask = np.ones_like(y, dtype=bool)
    mask[0, 0] = False  # a missing label counts nowhere
    cat = CategoryModel.fit(x, meta, cats, y, mask, prior_rows=5.0)
    assert cat.categories == ["a", "b"]
    overall = y[1:, 0].mean()
    for i, name in enumerate(cat.categories):
        r = (cats == name) & mask[:, 0]
        assert cat.rates[i, 0] == pytest.approx((y[r, 0].sum() + 5 * overall) / (r.sum() + 5))
    assert cat.rates[:, 1] == pytest.approx(1 - 1e-4)  # always right: clipped, never 1
    # The shape tells the categories apart, so the mixed rate follows them.
    p = cat.category_probs(x, meta)
    assert np.allclose(p.sum(axis=1), 1) and (cat.categories[0] == np.array(cat.categories)[p.argmax(1)]).sum() > 0
    assert (np.array(cat.categories)[p.argmax(1)] == cats).mean() > 0.9
    z = cat.logits(x, meta)
    assert z[cats == "a", 0].mean() > 2 and z[cats == "b", 0].mean() < 0


def test_one_category_and_many_categories():
    x, meta, _, y = _toy()
    one = CategoryModel.fit(x, meta, ["only"] * len(y), y, np.ones_like(y, dtype=bool))
    assert one.categories == ["only"] and np.allclose(one.category_probs(x, meta), 1.0)
    three = np.array(["a", "b", "c"])[np.arange(len(y)) % 3]
    many = CategoryModel.fit(x, meta, three, y, np.ones_like(y, dtype=bool))
    assert many.coef_lex.shape == (2, 3) and many.coef_meta.shape == (2, 3) and many.rates.shape == (3, 2)
    with pytest.raises(ValueError, match="differ"):
        CategoryModel.fit(x, meta[:5], three, y, np.ones_like(y, dtype=bool))


def test_the_torch_branch_computes_the_same_logits_and_survives_a_save(tmp_path):
    x, meta, cats, y = _toy()
    cat = CategoryModel.fit(x, meta, cats, y, np.ones_like(y, dtype=bool), weight=0.3)
    branch = cat.torch_branch()
    got = branch(torch.tensor(x.toarray(), dtype=torch.float32), torch.tensor(meta, dtype=torch.float32))
    sig = lambda z: 1 / (1 + np.exp(-z))  # float32 logits near the clip differ by ~1e-3; probabilities do not
    assert np.abs(sig(got.double().numpy()) - sig(cat.logits(x, meta))).max() < 1e-6
    cat.save(tmp_path)
    back = CategoryModel.load(tmp_path, json.loads(json.dumps(cat.settings())))
    assert back.categories == cat.categories and back.weight == 0.3
    assert np.allclose(back.logits(x, meta), cat.logits(x, meta))


# --- served: the recipe's numpy blend == PyTorch Router == ONNX Runtime client ----------------------------------

@pytest.fixture(scope="module")
def category_dir(tmp_path_factory, shared_data):
    from tests.routers import bfcl_sample, build_tiny_router
    from training.export import RequestEncoder
    from training.lexical import LexicalModel
    from training.router import load_router, save_router

    examples = bfcl_sample(shared_data, 40)
    out = build_tiny_router(tmp_path_factory.mktemp("category") / "router", examples)
    router = load_router(out)
    requests = [(e.messages, e.tools) for e in examples]
    ids = [router.pack_request(m, t).ids for m, t in requests]
    rng = np.random.default_rng(0)
    y = (rng.random((len(ids), 6)) < 0.7).astype(np.float32)
    mask = np.ones_like(y, dtype=bool)
    lex = LexicalModel.fit(ids, y, mask, special_ids=router.tokenizer.all_special_ids,
                           vocab_size=router.tokenizer.vocab_size, min_df=1, weight=0.4)
    meta = RequestEncoder(router.tokenizer, router.info).batch(requests)["metadata"]
    cat = CategoryModel.fit(lex.features(ids), meta, [e.category for e in examples], y, mask, weight=0.5)
    assert len(cat.categories) > 1
    info = {k: v for k, v in router.info.items() if k not in ("format", "head", "versions", "saved")}
    save_router(out, router.model, router.tokenizer, info, lexical=lex, category=cat)
    return out, requests


def test_pytorch_and_onnx_serve_the_training_blend_with_the_category_branch(category_dir, tmp_path):
    from serving.client import RouterClient
    from tests.routers import decide_with
    from training.export import export_router
    from training.router import load_router

    out, requests = category_dir
    router = load_router(out)
    assert router.category is not None and router.info["category"]["weight"] == 0.5
    expected = training_blend(out, requests)
    got = np.stack([router.predict(messages=m, tools=t) for m, t in requests])
    assert np.abs(got - expected).max() < 1e-5
    without = load_router(out)
    without.net.category = None
    assert np.abs(np.stack([without.predict(messages=m, tools=t) for m, t in requests]) - got)[:, :6].max() > 1e-3
    info = json.loads((out / "router.json").read_text())
    report = export_router(out, tmp_path / "onnx", requests=requests[:16], decide=decide_with(info), threads=1)
    assert report.max_abs_diff_fp32 < 1e-4
    client = RouterClient.from_dir(tmp_path / "onnx", threads=1, max_batch_size=8)
    try:
        assert np.abs(client.probabilities(requests) - expected).max() < 1e-4
    finally:
        client.close()


@pytest.mark.integration
def test_triton_serves_the_category_branch(category_dir, tmp_path):
    from serving.client import RouterClient
    from serving.triton import TritonServer, write_model_repository
    from tests.routers import decide_with
    from training.export import export_router

    out, requests = category_dir
    info = json.loads((out / "router.json").read_text())
    export_router(out, tmp_path / "onnx", requests=requests[:8], decide=decide_with(info), threads=1)
    repo = write_model_repository(tmp_path / "onnx", tmp_path / "model_repository", threads=1)
    with TritonServer(repo / "cpu", startup_timeout_s=90) as server:
        remote = RouterClient.from_dir(repo, backend="triton-http", url=server.http_url, timeout_s=10)
        try:
            assert np.abs(remote.probabilities(requests) - training_blend(out, requests)).max() < 1e-4
        finally:
            remote.close()
