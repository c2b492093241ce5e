"""`switchcraft bench train` on the toy task and the tiny backbone (tests/training/conftest.py): every case timed,
its held-out figures sane, the cases merged into one record.

    .venv/bin/python -m pytest -q tests/evaluation/bench/test_train.py
"""

from __future__ import annotations

import json

import pytest

from evaluation.bench.train import main
from tests.routers import REPO
from tests.training.conftest import tiny_backbone, toy_overrides, toy_task  # noqa: F401 - the fixtures

CONFIG = str(REPO / "configs" / "train.yaml")


def test_bench_train_times_each_case_and_merges_the_record(toy_task, tiny_backbone, tmp_path):  # noqa: F811
    extra = [o for o in toy_overrides(toy_task, tiny_backbone) if not o.startswith("run_dir=")] + [
        "folds=2", "frozen.epochs=8"]
    frozen, added = main(CONFIG, tmp_path, "frozen,add_model", steps=2, overrides=extra)
    assert frozen["case"] == "frozen" and frozen["folds_run"] == 2 and frozen["n_examples"] == 48
    assert frozen["wall_s"] > 0 and frozen["train_examples_per_s"] > 0 and set(frozen["per_model"]) == {"small", "big"}
    assert 0.5 < frozen["per_model"]["small"]["auc"] <= 1 and 0 <= frozen["macro_ece"] < 1
    # the pool's last model, added to a router trained without it; the full retrain never had it
    assert added["model"] == "extra" and 0.5 < added["add_model"]["auc"] <= 1 and added["add_model"]["n"] == 48
    assert added["base_router_s"] > 0 and added["full_retrain"] == {"auc": None, "ece": None}
    record = tmp_path / "bench_train.json"
    assert [r["case"] for r in json.loads(record.read_text())] == ["frozen", "add_model"]

    (finetune,) = main(CONFIG, tmp_path, "finetune", steps=2, overrides=extra)
    assert finetune["folds_run"] == 1 and "finetune.max_steps_per_epoch=2" in finetune["overrides"]
    assert [r["case"] for r in json.loads(record.read_text())] == ["frozen", "add_model", "finetune"]
    with pytest.raises(ValueError, match="the cases are frozen, finetune, distilbert, add_model"):
        main(CONFIG, tmp_path, "frozen,fast", overrides=extra)
