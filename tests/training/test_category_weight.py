"""The category branch's weight: the stored parts blended at it, and the router saved and served with it.

    .venv/bin/python -m pytest tests/training/test_category_weight.py -q
"""

from __future__ import annotations

import json

import numpy as np

from training.category import blend


def test_the_stored_parts_blend_at_the_configured_weight(tmp_path):
    """TrainRecipe._blend: head ⊕ lexical at `lexical.weight`, then the category part at the weight given;
    without one, the category part is left out."""
    from training.config import TrainConfig
    from training.recipe import TrainRecipe

    rng = np.random.default_rng(0)
    head, lexical, cat = (rng.normal(size=(30, 2)) for _ in range(3))
    recipe = TrainRecipe(TrainConfig.model_validate({"run_dir": str(tmp_path), "folds": 3}))
    parts = {"head": head, "lexical": lexical, "category": cat}
    rows = np.arange(10, 20)
    base = blend(head[rows], lexical[rows], recipe.cfg.lexical.weight)
    assert np.allclose(recipe._blend(parts, rows, 0.25), blend(base, cat[rows], 0.25))
    assert np.allclose(recipe._blend(parts, rows, 1.0), cat[rows])
    assert np.allclose(recipe._blend(parts, rows, None), base)


# --- end to end: the configured weight is the one saved and the one served ---------------------------------------

def test_the_configured_weight_is_saved_and_served(toy_task, tiny_backbone, tmp_path):
    """A toy run with two categories (one tool / several) and a category weight other than the default: the
    weight is in router.json and metrics.json, and PyTorch and the ONNX graph compute the blend with it."""
    from data.schema import read_examples, write_examples
    from serving.client import RouterClient
    from tests.routers import decide_with, training_blend
    from tests.training.conftest import toy_overrides
    from training.config import load_train_config
    from training.export import export_router
    from training.recipe import run_training
    from training.router import load_router

    examples = [e.model_copy(update={"category": "one" if len(e.tools) == 1 else "many"})
                for e in read_examples(toy_task / "examples.parquet")]
    write_examples(toy_task / "examples.parquet", examples)
    w = 0.75  # not the default 0.5, so a blend at the default would differ
    cfg = load_train_config("configs/train.yaml", toy_overrides(toy_task, tiny_backbone) + [
        f"category.weight={w}", "category.c=10", "frozen.epochs=5"])
    metrics = run_training(cfg)
    assert metrics["parts"]["category_weight"] == w and metrics["parts"]["category_c"] == 10.0
    info = json.loads((cfg.router_dir / "router.json").read_text())
    assert info["category"]["weight"] == w and info["config"]["category"]["c"] == 10.0

    router = load_router(cfg.router_dir)
    assert router.net.category.weight == w
    requests = [([m.model_dump() for m in e.messages], [t.model_dump() for t in e.tools]) for e in examples]
    served = np.stack([router.predict(messages=m, tools=t) for m, t in requests])
    # The blend recomputed from its parts with the weight read from metrics.json, not from the router.
    assert np.abs(served - training_blend(cfg.router_dir, requests, wc=w)).max() < 1e-5
    assert np.abs(served - training_blend(cfg.router_dir, requests, wc=0.5)).max() > 1e-3
    export_router(cfg.router_dir, tmp_path / "onnx", requests=requests[:8], decide=decide_with(info), threads=1)
    client = RouterClient.from_dir(tmp_path / "onnx", threads=1, max_batch_size=8)
    try:
        assert np.abs(client.probabilities(requests) - served).max() < 1e-4
    finally:
        client.close()
