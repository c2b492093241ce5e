"""Extra training targets: other recorded models' labels, in table order; the head keeps only the pool's outputs.

    .venv/bin/python -m pytest tests/training/test_aux_targets.py -q
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from data.schema import Call, Output, read_examples, write_outputs
from tests.training.conftest import toy_overrides
from training.aux_targets import aux_targets
from training.config import load_train_config
from training.model import RouterModel
from training.recipe import run_training
from training.router import load_router


def recorded(example_id: str, model: str, answers: bool) -> Output:
    """The toy task expects no call: an output without calls is right, one with a call is wrong."""
    calls = [] if answers else [Call(name="get_weather_0", arguments={"x": "y"})]
    return Output(example_id=example_id, model=model, raw="…", calls=calls)


def toy_outputs(examples) -> list[Output]:
    """helper is right on the easy questions only; the pool's small is recorded too (it must be left out)."""
    out = []
    for ex in examples:
        easy = "easy" in ex.messages[0].content
        out += [recorded(ex.id, "helper", easy), recorded(ex.id, "small", True)]
    return out


def test_labels_of_models_outside_the_pool_in_table_order(toy_task):
    examples = read_examples(toy_task / "examples.parquet")
    outputs = toy_outputs(examples[:10])[::-1]  # order must not matter
    ids = [e.id for e in examples[:12]]  # the last two have no recorded output
    aux = aux_targets(outputs, {e.id: e for e in examples}, exclude={"small", "big"}, example_ids=ids)
    assert aux.models == ["helper"] and aux.y.shape == (12, 1)
    easy = np.array(["easy" in e.messages[0].content for e in examples[:12]])
    assert aux.mask[:, 0].tolist() == [True] * 10 + [False] * 2
    assert aux.y[:10, 0].tolist() == easy[:10].astype(float).tolist()
    none = aux_targets(outputs, {e.id: e for e in examples}, exclude={"small", "helper"}, example_ids=ids)
    assert none.models == [] and none.y.shape == (12, 0)


def test_keep_outputs_cuts_the_head_and_keeps_its_first_logits(tiny_backbone):
    from training.model import load_backbone
    from training.config import BackboneSettings

    encoder, _ = load_backbone(BackboneSettings(name=str(tiny_backbone)))
    model = RouterModel(encoder, n_meta=3, n_models=5, head_hidden=8).eval()
    feats, meta = torch.randn(4, model.feature_size), torch.randn(4, 3)
    with torch.no_grad():
        before = model(meta, features=feats)
        model.keep_outputs(2)
        after = model(meta, features=feats)
    assert model.head_sizes == [2] and torch.allclose(after, before[:, :2])
    with pytest.raises(ValueError, match="cannot keep 3 of 2"):
        model.keep_outputs(3)


def test_training_with_extra_targets_serves_only_the_pool(toy_task, tiny_backbone):
    examples = read_examples(toy_task / "examples.parquet")
    write_outputs(toy_task / "outputs.parquet", toy_outputs(examples))
    cfg = load_train_config("configs/train.yaml", toy_overrides(toy_task, tiny_backbone) + [
        f"aux.outputs={toy_task}/outputs.parquet", "aux.weight=0.5"])
    metrics = run_training(cfg)
    assert metrics["parts"]["aux_models"] == 1 and metrics["parts"]["aux_weight"] == 0.5
    assert {"head", "lexical"} <= set(metrics["parts"]) and metrics["timing"]["aux_labels_s"] >= 0
    info = json.loads((cfg.router_dir / "router.json").read_text())
    assert info["aux_models"] == ["helper"] and info["head"]["sizes"] == [2] and info["models"] == ["small", "big"]
    assert info["lexical"]["n_models"] == 2 and (cfg.router_dir / "lexical.safetensors").exists()
    assert load_router(cfg.router_dir).predict(examples).shape == (48, 2)


def test_auto_finds_the_run_dirs_outputs_and_a_missing_file_says_how_to_fix(toy_task, tiny_backbone):
    base = toy_overrides(toy_task, tiny_backbone)
    assert load_train_config("configs/train.yaml", base).aux_outputs is None  # no outputs.parquet in the run dir
    (toy_task / "run").mkdir()
    write_outputs(toy_task / "run" / "outputs.parquet", [])
    assert load_train_config("configs/train.yaml", base).aux_outputs == toy_task / "run" / "outputs.parquet"
    assert load_train_config("configs/train.yaml", [*base, "aux.outputs=null"]).aux_outputs is None
    from data.errors import DataError

    cfg = load_train_config("configs/train.yaml", [*base, f"aux.outputs={toy_task}/nowhere.parquet"])
    with pytest.raises(DataError, match="aux outputs file not found"):
        run_training(cfg)
