"""Transfer: the session's tiny router (tests/routers.py, over configs/pool.yaml's 8 models) scored on a test run
whose pool shares five of them and adds one it never saw; labels and held-out predictions are made up here.

    .venv/bin/python -m pytest -q tests/evaluation/offline/test_transfer.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from data.pool import load_pool
from data.schema import Label, Output, write_examples, write_labels, write_outputs
from evaluation.offline.transfer import BEST, category_filter, load_side, transfer, write_transfer
from tests.routers import REPO, bfcl_sample

ROUTER_POOL = REPO / "configs" / "pool.yaml"
SHARED = ["gpt-4o-mini-2024-07-18", "claude-3-haiku-20240307", "claude-3-5-sonnet-20240620", "gpt-4-0613",
          "gemini-1.5-flash-preview-0514"]
UNSEEN = "a-model-the-router-never-saw"


def make_run(run: Path, examples: list, pool_path: Path, models: list[str], seed: int) -> Path:
    """A reproduce-shaped run: examples, random labels (priced), 3-fold held-out predictions, outputs."""
    rng = np.random.default_rng(seed)
    run.mkdir(parents=True)
    write_examples(run / "examples.parquet", examples)
    skill = {m: 0.4 + 0.5 * i / len(models) for i, m in enumerate(models)}
    labels, oof, outputs = [], [], []
    for k, e in enumerate(examples):
        for j, m in enumerate(models):
            ok = bool(rng.random() < skill[m])
            labels.append(Label(example_id=e.id, model=m, correct=ok, reason="ok" if ok else "wrong_value",
                                cost_usd=1e-4 * (j + 1)))
            oof.append({"example_id": e.id, "fold": k % 3, "model": m, "prob": float(rng.uniform(0.05, 0.95))})
            outputs.append(Output(example_id=e.id, model=m, raw="x", calls=[]))
    write_labels(run / "labels.parquet", labels)
    write_outputs(run / "outputs.parquet", outputs)
    pd.DataFrame(oof).to_parquet(run / "oof_predictions.parquet")
    (run / "labels.json").write_text(json.dumps({"pool": str(pool_path)}))
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory, shared_data, tiny_router_dir):
    root = tmp_path_factory.mktemp("transfer")
    examples = list({e.id: e for e in bfcl_sample(shared_data, 40)}.values())[:36]  # the sample may repeat one
    router_models = load_pool(ROUTER_POOL).names
    train = make_run(root / "train", examples, ROUTER_POOL, router_models, seed=1)
    shutil.copytree(tiny_router_dir, train / "router")
    base = {m.name: m for m in load_pool(ROUTER_POOL).models}
    pool = {"models": [base[m].model_dump(exclude_none=True) for m in SHARED]
            + [{"name": UNSEEN, "prices": {"input_per_mtok": 1.0, "output_per_mtok": 1.0}}]}
    (root / "test_pool.yaml").write_text(json.dumps(pool))
    test = make_run(root / "test", examples[:30], root / "test_pool.yaml", SHARED + [UNSEEN], seed=2)
    return train, test


def test_scores_the_router_on_the_shared_models_with_intervals(runs, tmp_path):
    train, test = runs
    result = transfer(load_side(train), load_side(test))
    assert result.shared == SHARED  # the test pool's order, the unseen model left out
    table = result.table()
    names = list(table.routing)
    assert names[:2] == ["transferred router, τ as trained for best-single accuracy",
                         "transferred router, τ as trained for ≤ 10% of best-single cost"]
    assert {"test side's own router (held out), τ for best-single accuracy", BEST, "cheapest model (test side)",
            "oracle"} <= set(names)
    assert "transferred strategy policy, λ as trained" not in names  # router.json has none
    for r in table.itertuples():
        assert r.accuracy_ci_low <= r.accuracy <= r.accuracy_ci_high, r.routing
        assert r.usd_per_million_ci_low <= r.usd_per_million <= r.usd_per_million_ci_high, r.routing
    best = table.set_index("routing").loc[BEST]
    assert best.delta_accuracy == 0 and best.vs_best_single == "reference"
    oracle = table.set_index("routing").loc["oracle"]
    assert oracle.accuracy == table.accuracy.max()
    assert result.context["test_queries"] == 30 and set(result.context["tau_as_trained"]) == {"match_best", "cost_fraction"}
    cats = result.per_category()
    assert cats.n.sum() == 30 and {"transferred", "own router", "best single", "oracle"} <= set(cats.columns)
    path = write_transfer(result, tmp_path / "out")
    assert "| routing |" in path.read_text() and "gpt-4-0613" in path.read_text()
    assert len(pd.read_csv(tmp_path / "out" / "transfer.csv")) == len(table)


def test_the_strategy_policy_never_calls_a_model_outside_the_shared_ones(runs, tmp_path):
    from training.policy import Strategy, StrategyPolicy

    train, test = runs
    router = tmp_path / "router"
    shutil.copytree(train / "router", router)
    info = json.loads((router / "router.json").read_text())
    models = info["models"]
    menu = [Strategy.agree(SHARED[0], "gpt-4o-2024-08-06-FC", escalate=(SHARED[1],)),  # calls a non-shared model
            Strategy.single(SHARED[2]), Strategy.single(SHARED[0])]
    m = len(models)
    policy = StrategyPolicy(models, menu, np.zeros(m), np.ones(m), np.zeros((3, m)), np.array([5.0, 2.0, -2.0]),
                            np.zeros(3), lam=1.0)
    info["strategy_policy"] = {**policy.to_json(), "target": "cost_fraction 0.2"}
    (router / "router.json").write_text(json.dumps(info))
    result = transfer(load_side(train), load_side(test), router)
    rows = {r.name: r for r in result.rows}
    got = rows["transferred strategy policy, λ as trained"]
    side = load_side(test)
    lab = {(lb.example_id, lb.model): lb for lb in side.labels}
    ids = side.data(SHARED).example_ids
    # The best estimate calls a model outside the shared ones: the next one, single(SHARED[2]), runs everywhere.
    assert got.correct.tolist() == [lab[(e, SHARED[2])].correct for e in ids]
    assert np.allclose(got.cost, [lab[(e, SHARED[2])].cost_usd for e in ids])


def test_category_filter_and_a_split_side():
    live = category_filter("live_", inside=True)
    assert live("live_multiple") and not live("multiple") and category_filter("live_", inside=False)("irrelevance")
    assert category_filter("*irrelevance", inside=True)("live_irrelevance")


def test_a_side_keeps_only_the_categories_asked_for(runs):
    _, test = runs
    side = load_side(test, keep=category_filter("simple", inside=True))
    assert side.examples and all(e.category == "simple" for e in side.examples.values())
    assert {lb.example_id for lb in side.labels} <= set(side.examples)


def test_the_command_writes_the_tables(runs, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from switchcraft.cli import app

    train, test = runs
    monkeypatch.chdir(REPO)
    result = CliRunner().invoke(app, ["transfer", "--train-run", str(train), "--test-run", str(test),
                                      "--out", str(tmp_path / "t")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "t" / "transfer.md").exists() and (tmp_path / "t" / "per_category.csv").exists()
    missing = CliRunner().invoke(app, ["transfer", "--train-run", str(tmp_path), "--test-run", str(test)])
    assert missing.exit_code == 1 and "not a reproduce run" in missing.output
