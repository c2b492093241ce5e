"""End to end on a toy task with a tiny random BERT: train, save, load, identical predictions; add a model; the CLI.

    .venv/bin/python -m pytest tests/training/test_recipe.py -q
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from data.schema import read_examples
from tests.training.conftest import toy_overrides
from training.config import load_train_config
from training.metadata import FEATURE_NAMES
from training.recipe import run_training
from training.router import load_router

TRAIN_YAML = "configs/train.yaml"


def config(toy_task, tiny_backbone, *extra):
    return load_train_config(TRAIN_YAML, toy_overrides(toy_task, tiny_backbone) + list(extra))


def test_frozen_training_learns_the_toy_task_and_round_trips(toy_task, tiny_backbone):
    cfg = config(toy_task, tiny_backbone)
    metrics = run_training(cfg)
    # big is wrong exactly on "hard" questions (a token the encoder sees); small iff one tool (metadata n_tools)
    assert metrics["per_model"]["small"]["auc"] > 0.9
    assert metrics["per_model"]["big"]["base_rate"] == pytest.approx(0.75)
    assert metrics["folds_run"] == 3 and len(metrics["fold_details"]) == 3

    oof = pd.read_parquet(toy_task / "run" / "oof_predictions.parquet")
    assert list(oof.columns) == ["example_id", "fold", "model", "prob", "prob_uncalibrated", "correct"]
    assert len(oof) == 48 * 2 and set(oof.fold) == {0, 1, 2} and oof.prob.between(0, 1).all()
    assert oof.groupby("example_id").fold.nunique().max() == 1

    router_dir = cfg.router_dir
    info = json.loads((router_dir / "router.json").read_text())
    assert info["models"] == ["small", "big"] and info["threshold"] == 0.5
    assert info["prices"]["big"]["input_per_mtok"] == 10
    assert info["cost_profile"]["small"] == pytest.approx(1.5e-5)  # mean of 1e-5 and 2e-5
    assert info["metadata"]["features"] == FEATURE_NAMES and info["packing"]["max_tokens"] == 64
    assert len(info["metadata"]["mean"]) == len(info["metadata"]["log1p"]) == len(FEATURE_NAMES)
    assert {"torch", "transformers"} <= set(info["versions"]) and info["config"]["mode"] == "frozen"
    assert (router_dir / "reliability.png").stat().st_size > 1000
    assert (router_dir / "metrics.json").exists()
    # The novelty index (training/novelty.py): fitted held out on the same folds; its safe model the most accurate.
    nv = info["novelty"]
    assert (router_dir / nv["file"]).exists() and nv["held_out_flagged"] <= 0.02 + 1e-9 and nv["rows"] == 48
    rates = {m: metrics["per_model"][m]["base_rate"] for m in info["models"]}
    assert nv["safe_model"] == max(rates, key=rates.get)

    examples = read_examples(toy_task / "examples.parquet")
    a = load_router(router_dir).predict(examples)
    b = load_router(router_dir).predict(examples)
    assert a.shape == (48, 2) and np.array_equal(a, b)
    one = load_router(router_dir).predict(messages=[m.model_dump() for m in examples[0].messages],
                                          tools=[t.model_dump() for t in examples[0].tools])
    assert one.shape == (2,) and np.allclose(one, a[0], atol=1e-6)


def test_finetune_changes_the_encoder_and_saved_predictions_match(toy_task, tiny_backbone):
    import torch
    from transformers import AutoModel

    cfg = config(toy_task, tiny_backbone, "mode=finetune", "max_folds=1")
    metrics = run_training(cfg)
    assert metrics["folds_run"] == 1 and metrics["fold_details"][0]["train_examples_per_s"] > 0
    router = load_router(cfg.router_dir)
    before = AutoModel.from_pretrained(tiny_backbone).embeddings.word_embeddings.weight
    after = router.model.encoder.embeddings.word_embeddings.weight
    assert not torch.equal(before, after)
    examples = read_examples(toy_task / "examples.parquet")[:5]
    assert np.array_equal(router.predict(examples), load_router(cfg.router_dir).predict(examples))


def test_add_model_appends_one_head_and_keeps_the_others(toy_task, tiny_backbone):
    from training.add_model import add_model

    cfg = config(toy_task, tiny_backbone, "max_folds=1")
    run_training(cfg)
    examples = read_examples(toy_task / "examples.parquet")
    before = load_router(cfg.router_dir).predict(examples)
    m = add_model(cfg, "extra")
    router = load_router(cfg.router_dir)
    assert router.models == ["small", "big", "extra"] and router.prices["extra"]["input_per_mtok"] == 1
    after = router.predict(examples)
    assert np.allclose(after[:, :2], before, atol=1e-6)  # existing heads untouched
    assert m["auc"] > 0.9  # extra is right iff >= 2 tools: visible in the metadata
    with pytest.raises(Exception, match="already routed"):
        add_model(cfg, "extra")


def test_cli_trains_and_reports_errors(toy_task, tiny_backbone):
    from switchcraft.cli_train import register

    app = typer.Typer()
    register(app)
    app.command("noop")(lambda: None)  # a second command, so `train` stays a subcommand
    runner = CliRunner()
    args = ["train", "--config", TRAIN_YAML, *toy_overrides(toy_task, tiny_backbone), "final_fit=false", "max_folds=1"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "small" in res.output and "AUC" in res.output
    res = runner.invoke(app, ["train", "--config", TRAIN_YAML, "mode=fast"])
    assert res.exit_code == 1 and "allowed: 'frozen' or 'finetune'" in res.output
    res = runner.invoke(app, ["train", "--config", TRAIN_YAML, f"labels={toy_task}/nope.parquet"])
    assert res.exit_code == 1 and "switchcraft label" in res.output
    res = runner.invoke(app, ["train", "--config", TRAIN_YAML, *toy_overrides(toy_task, tiny_backbone), "models=[huge]"])
    assert res.exit_code == 1 and "['huge'] are not in the pool" in res.output and "pool: small, big, extra" in res.output
