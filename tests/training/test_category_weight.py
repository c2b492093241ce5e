"""The category branch's weight and C: chosen on the training folds' out-of-fold rows only, and served as saved.

    .venv/bin/python -m pytest tests/training/test_category_weight.py -q
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from training.category import blend, choose_category, inner_fold_choices, mean_log_loss

GRID = [0.0, 0.25, 0.5, 0.75, 1.0]


def _stacked(n_per_fold=(60, 60, 200), seed=0):
    """Three folds. On folds 0 and 1 the category branch is right and the base blend is noise: weight 1 is best.
    On fold 2 (the biggest) the category branch is exactly wrong: weight 0 is best there, and on all rows too."""
    rng = np.random.default_rng(seed)
    fold = np.repeat(np.arange(3), n_per_fold)
    n = len(fold)
    y = (rng.random((n, 2)) < 0.5).astype(float)
    base = rng.normal(0, 0.3, (n, 2))
    good = np.where(y > 0.5, 2.0, -2.0)
    cat = np.where(fold[:, None] == 2, -good, good)
    return base, cat, y, np.ones_like(y, dtype=bool), fold


def test_log_loss_is_the_mean_negative_log_likelihood_of_the_labelled_pairs():
    z = np.array([[0.0, 2.0], [-1.0, 50.0]])
    y = np.array([[1.0, 0.0], [0.0, 1.0]])
    mask = np.array([[True, True], [True, False]])
    want = np.mean([np.log(2), np.log1p(np.exp(2.0)), np.log1p(np.exp(-1.0))])
    assert mean_log_loss(z, y, mask) == pytest.approx(want)


def test_each_folds_weight_is_chosen_without_its_own_labels():
    base, cat, y, mask, fold = _stacked()
    # Fold 2's labels would pick weight 0, and so would all rows together (fold 2 is the biggest) ...
    assert choose_category(base[fold == 2], {1.0: cat[fold == 2]}, y[fold == 2], mask[fold == 2], GRID)[1] == 0.0
    assert choose_category(base, {1.0: cat}, y, mask, GRID)[1] == 0.0
    # ... but held-out fold 2 gets what folds 0 and 1 say, and folds 0 and 1 what the others (fold 2 among them) say.
    choice = inner_fold_choices(base, {1.0: cat}, y, mask, fold, GRID)
    assert choice[2][1] == 1.0
    on_01 = choose_category(base[fold < 2], {1.0: cat[fold < 2]}, y[fold < 2], mask[fold < 2], GRID)
    assert choice[2] == pytest.approx(on_01)
    assert choice[0][1] == 0.0 and choice[1][1] == 0.0
    # Any change to fold 2's labels (here: all flipped) leaves fold 2's choice as it was.
    y2 = np.where(fold[:, None] == 2, 1 - y, y)
    assert inner_fold_choices(base, {1.0: cat}, y2, mask, fold, GRID)[2] == pytest.approx(choice[2])
    # Unfinished folds (-1) and unlabelled pairs count nowhere.
    fold_ = np.where(np.arange(len(fold)) % 7 == 0, -1, fold)
    mask_ = mask & (np.arange(len(fold)) % 5 != 0)[:, None]
    got = inner_fold_choices(base, {1.0: cat}, y, mask_, fold_, GRID)
    keep = (fold_ >= 0) & (fold_ < 2)
    assert got[2] == pytest.approx(choose_category(base[keep], {1.0: cat[keep]}, y[keep], mask_[keep], GRID))
    assert set(got) == {0, 1, 2}


def test_c_is_chosen_with_the_weight_and_ties_keep_the_first():
    base, cat, y, mask, fold = _stacked()
    soft = cat / 4  # a softer classifier: right on folds 0, 1 but less sure
    c, w, _ = choose_category(base[fold < 2], {1.0: soft[fold < 2], 10.0: cat[fold < 2]}, y[fold < 2], mask[fold < 2], GRID)
    assert (c, w) == (10.0, 1.0)
    # Weight 0 ignores the branch, so every C ties there: the first C is kept.
    c, w, _ = choose_category(base[fold == 2], {1.0: soft[fold == 2], 10.0: cat[fold == 2]}, y[fold == 2],
                              mask[fold == 2], GRID)
    assert (c, w) == (1.0, 0.0)
    with pytest.raises(ValueError, match="no labelled"):
        choose_category(base, {1.0: cat}, y, np.zeros_like(mask), GRID)


def test_the_recipe_chooses_per_fold_on_the_other_folds_and_for_the_router_on_all(tmp_path):
    """TrainRecipe._choose_category on stored parts: the same choices as inner_fold_choices, and the blend."""
    from training.config import TrainConfig
    from training.recipe import TrainRecipe

    base, cat, y, mask, fold = _stacked()
    cfg = TrainConfig.model_validate({"run_dir": str(tmp_path), "folds": 3,
                                      "category": {"weight_grid": GRID, "c_grid": [1, 10]}})
    recipe = TrainRecipe(cfg)
    recipe.table = SimpleNamespace(y=y, mask=mask)
    # head ⊕ lexical (lexical.weight 0.5) = base when both parts are base
    recipe.oof_parts = {"head": base, "lexical": base, "category_c1": cat / 4, "category_c10": cat}
    recipe.oof_fold, recipe.fold_records = fold, [{}, {}, {}]
    pairs = recipe._choose_category()
    want = inner_fold_choices(base, {1.0: cat / 4, 10.0: cat}, y, mask, fold, GRID)
    assert pairs == {f: want[f][:2] for f in range(3)} and pairs[2] == (10.0, 1.0)
    final = recipe.category_choice["final"]
    assert (final["c"], final["weight"]) == choose_category(base, {1.0: cat / 4, 10.0: cat}, y, mask, GRID)[:2]
    test = np.flatnonzero(fold == 2)
    assert np.allclose(recipe._blend(recipe.oof_parts, test, 10.0, 1.0), cat[test])
    assert np.allclose(recipe._blend(recipe.oof_parts, test, 1.0, 0.25), blend(base[test], cat[test] / 4, 0.25))
    # Without grids nothing is chosen: the configured pair everywhere.
    recipe.cfg = TrainConfig.model_validate({"run_dir": str(tmp_path), "folds": 3})
    recipe.oof_parts = {"head": base, "lexical": base, "category": cat}
    assert recipe._choose_category() == {0: (1.0, 0.5), 1: (1.0, 0.5), 2: (1.0, 0.5)}
    assert recipe.category_choice is None


def test_grids_are_validated():
    from training.config import CategorySettings

    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        CategorySettings(weight_grid=[0.5, 1.5])
    with pytest.raises(ValueError, match="distinct"):
        CategorySettings(c_grid=[1, 1])


# --- end to end: the chosen weight is the one saved and the one served ----------------------------------------

def test_the_chosen_weight_is_saved_and_served(toy_task, tiny_backbone, tmp_path):
    """A toy run with two categories (one tool / several): the weight and C chosen on all out-of-fold rows are in
    router.json and metrics.json, and PyTorch and the ONNX graph compute the blend with that weight."""
    from data.schema import read_examples, write_examples
    from serving.client import RouterClient
    from tests.serving.test_export import decide_with
    from tests.training.conftest import toy_overrides
    from tests.training.test_category import training_blend
    from training.config import load_train_config
    from training.export import export_router
    from training.recipe import run_training
    from training.router import load_router

    examples = [e.model_copy(update={"category": "one" if len(e.tools) == 1 else "many"})
                for e in read_examples(toy_task / "examples.parquet")]
    write_examples(toy_task / "examples.parquet", examples)
    # No 0.5 on the grid: whatever is chosen differs from the configured `weight`.
    cfg = load_train_config("configs/train.yaml", toy_overrides(toy_task, tiny_backbone) + [
        "category.weight_grid=[0.25, 0.75, 1]", "category.c_grid=[1, 10]", "frozen.epochs=5"])
    metrics = run_training(cfg)
    choice = metrics["parts"]["category_choice"]
    assert len(choice["per_fold"]) == 3 and all(c["weight"] in (0.25, 0.75, 1.0) for c in choice["per_fold"])
    w, c = choice["final"]["weight"], choice["final"]["c"]
    assert metrics["parts"]["category_weight"] == w and metrics["parts"]["category_c"] == c and w != 0.5
    info = json.loads((cfg.router_dir / "router.json").read_text())
    assert info["category"]["weight"] == w and info["category"]["choice"]["final"]["c"] == c

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
