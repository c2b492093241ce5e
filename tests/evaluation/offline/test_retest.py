"""Test–retest of labels between two recorded runs, on tiny recording folders written here.

    .venv/bin/python -m pytest -q tests/evaluation/offline/test_retest.py
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from data.errors import DataError
from data.labels import label_outputs
from data.pool import Pool, PoolModel, Prices
from data.recorded import import_recorded
from data.schema import Call, Example, Expected, Message, Tool
from evaluation.offline.retest import bootstrap_interval, cohen_kappa, retest, write_retest

REPO = Path(__file__).resolve().parents[3]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def example(i: int) -> Example:
    return Example(
        id=f"bfcl_v1:simple_{i}", source="bfcl_v1", category="simple",
        messages=[Message(role="user", content=f"f of {i}")],
        tools=[Tool(name="f", parameters={"type": "object", "properties": {"n": {"type": "integer"}}})],
        expected=Expected.exact([Call(name="f", arguments={"n": i})]),
    )


def answers(right: dict[int, bool], tokens_in: int) -> list[dict]:
    """BFCL v1 lines: a right answer is f(n=i), a wrong one f(n=i+100)."""
    return [{"id": f"simple_{i}", "result": f"[f(n={i if ok else i + 100})]",
             "input_token_count": tokens_in, "output_token_count": 10, "latency": 0.3} for i, ok in right.items()]


EXAMPLES = {e.id: e for e in map(example, range(4))}
# $1 / $2 per million input / output tokens: a = 1,000 in → $0.00102 a call; b = 100 in → $0.00012.
POOL = Pool(models=[
    PoolModel(name="a", recorded_as="a-rec", prompt_style="prompt", prices=Prices(input_per_mtok=1, output_per_mtok=2)),
    PoolModel(name="b", prompt_style="prompt", prices=Prices(input_per_mtok=1, output_per_mtok=2)),
    PoolModel(name="c", prompt_style="prompt", prices=Prices(input_per_mtok=1, output_per_mtok=2)),
])


@pytest.fixture
def runs(tmp_path) -> tuple[Path, Path]:
    later, earlier = tmp_path / "later", tmp_path / "earlier"
    write_jsonl(later / "a-rec" / "simple.jsonl", answers({0: True, 1: True, 2: False, 3: True}, 1000))
    write_jsonl(later / "b" / "simple.jsonl", answers({0: False, 1: True, 2: True, 3: False}, 100))
    write_jsonl(later / "c" / "simple.jsonl", answers({0: True, 1: True, 2: True, 3: True}, 100))
    # Earlier: a lacks simple_3 and has an id no example answers; c was not in this run.
    write_jsonl(earlier / "a-rec" / "simple.jsonl",
                answers({0: True, 1: False, 2: False}, 900) + [{"id": "simple_9", "result": "[f(n=9)]"}])
    write_jsonl(earlier / "b" / "simple.jsonl", answers({0: False, 1: True, 2: False, 3: False}, 90))
    return later, earlier


def labels_of(folder: Path):
    return label_outputs(import_recorded(folder, examples=EXAMPLES, progress=False), EXAMPLES, POOL)


def test_per_model_agreement_kappa_and_flips(runs):
    later, earlier = runs
    res = retest(EXAMPLES, POOL, labels_of(later), earlier, resamples=200)
    pm = res.per_model.set_index("model")
    a, b = pm.loc["a"], pm.loc["b"]
    # a on simple_0..2: earlier [T, F, F], later [T, T, F]
    assert a["queries_both"] == 3 and a["agreement"] == pytest.approx(2 / 3)
    assert (a["accuracy_earlier"], a["accuracy_later"]) == (pytest.approx(1 / 3), pytest.approx(2 / 3))
    assert a["kappa"] == pytest.approx(0.4)  # po 2/3, pe 4/9
    assert (a["right_to_wrong"], a["wrong_to_right"]) == (0, 1)
    # b on simple_0..3: earlier [F, T, F, F], later [F, T, T, F]
    assert b["queries_both"] == 4 and b["agreement"] == pytest.approx(0.75) and b["kappa"] == pytest.approx(0.5)
    assert (b["right_to_wrong"], b["wrong_to_right"]) == (0, 1)
    assert res.present == ["a", "b"] and res.absent == ["c"]
    assert not pm.loc["c", "in_earlier_run"] and math.isnan(pm.loc["c", "agreement"])


def test_oracles_costs_and_intervals(runs):
    later, earlier = runs
    res = retest(EXAMPLES, POOL, labels_of(later), earlier, resamples=300, seed=1)
    orc = res.oracles.set_index("routing")
    assert res.n_queries == 3  # simple_3 is missing from a's earlier run
    assert orc.loc["oracle", "accuracy"] == 1.0
    assert orc.loc["stable oracle", "accuracy"] == pytest.approx(2 / 3)  # simple_2: b right only later
    assert orc.loc["either-run oracle", "accuracy"] == 1.0
    assert orc.loc["stable oracle", "accuracy"] <= orc.loc["oracle", "accuracy"] <= orc.loc["either-run oracle", "accuracy"]
    # Cheapest right, later-run prices: a on simple_0 ($1,020/M), b on 1 and 2 ($120/M) -> mean $420/M.
    assert orc.loc["oracle", "usd_per_million"] == pytest.approx(420.0)
    # Best single (tie on 2/3 later: the cheaper b); right in both only on simple_1.
    assert orc.loc["best single (b), later run", "accuracy"] == pytest.approx(2 / 3)
    assert orc.loc["best single (b), right in both", "accuracy"] == pytest.approx(1 / 3)
    assert orc.loc["best single (b), later run", "usd_per_million"] == pytest.approx(120.0)
    stable = res.intervals["stable oracle"]
    assert 0.0 <= stable.low <= 2 / 3 <= stable.high <= 1.0
    assert res.intervals["oracle"].low == res.intervals["oracle"].high == 1.0  # right on every query
    assert res.per_category.to_dict("records") == [
        {"category": "simple", "queries": 3, "oracle": 1.0, "stable_oracle": pytest.approx(2 / 3), "either_run_oracle": 1.0}]


def test_skipped_rows_are_counted_by_reason(runs):
    later, earlier = runs
    res = retest(EXAMPLES, POOL, labels_of(later), earlier, resamples=50)
    got = {(r.stage, r.model, r.reason): r.rows for r in res.skipped.itertuples()}
    assert got == {
        ("earlier run", "c", "model absent from the earlier run"): 1,
        ("import earlier", "a", "no example for id"): 1,
        ("per model", "a", "labelled in the later run only"): 1,
        ("oracle", "a", "query not labelled in the earlier run for every model in both"): 1,
    }


def test_write_retest_files(runs, tmp_path):
    later, earlier = runs
    res = retest(EXAMPLES, POOL, labels_of(later), earlier, resamples=50)
    md = write_retest(res, tmp_path / "out")
    out = md.parent
    assert {p.name for p in out.iterdir()} == {"retest.csv", "retest_oracles.csv", "retest.json", "retest.md", "retest.png"}
    meta = json.loads((out / "retest.json").read_text())
    assert meta["absent"] == ["c"] and meta["n_queries"] == 3
    assert meta["per_model"][2]["agreement"] is None  # c: NaN written as null
    text = md.read_text()
    assert "| stable oracle | 3 | 0.667 |" in text and "absent from the earlier run (1): c" in text
    assert (out / "retest.png").read_bytes()[:4] == b"\x89PNG"


def test_kappa_edges_and_bootstrap():
    t, f = np.array([1, 1, 0, 0], bool), np.array([0, 0, 1, 1], bool)
    assert cohen_kappa(t, t) == 1.0 and cohen_kappa(t, f) == -1.0
    assert math.isnan(cohen_kappa(np.ones(3, bool), np.ones(3, bool)))  # no variation: undefined
    idx = np.random.default_rng(0).integers(0, 4, size=(500, 4))
    ci = bootstrap_interval(np.array([1, 1, 1, 0]), idx)
    assert 0.0 <= ci.low < 0.75 < ci.high <= 1.0


def test_errors_name_the_folder(tmp_path):
    with pytest.raises(DataError, match="no such folder of earlier recordings"):
        retest(EXAMPLES, POOL, [], tmp_path / "nowhere")
    write_jsonl(tmp_path / "other" / "x" / "simple.jsonl", answers({0: True}, 10))
    with pytest.raises(DataError, match="no pool model is recorded in the earlier run"):
        retest(EXAMPLES, POOL, [], tmp_path / "other")


def test_real_runs_one_category(shared_data):
    """The real default pool on BFCL v1 `javascript` (50 queries, ~2 s): 4 of its 8 models are in both runs."""
    from data.labels import load_examples
    from data.pool import load_pool

    examples = {k: e for k, e in load_examples(shared_data / "bfcl_v1").items() if e.category == "javascript"}
    pool = load_pool(REPO / "configs" / "pool.yaml")
    later = import_recorded(shared_data / "bfcl_v1_pool_outputs_2024-08-11", examples=examples,
                            models=[m.recording for m in pool.models], progress=False)
    res = retest(examples, pool, label_outputs(later, examples, pool), shared_data / "bfcl_v1_pool_outputs_2024-07-25")
    assert res.present == ["claude-3-opus-20240229", "claude-3-5-sonnet-20240620",
                           "gemini-1.5-flash-preview-0514", "claude-3-haiku-20240307"]
    assert len(res.absent) == 4 and res.n_queries == 50
    pm = res.per_model.set_index("model").loc[res.present]
    assert (pm["queries_both"] == 50).all()
    assert ((pm["agreement"] > 0.5) & (pm["agreement"] <= 1.0)).all()
    flips = pm["right_to_wrong"] + pm["wrong_to_right"]
    assert flips.tolist() == pytest.approx(((1 - pm["agreement"]) * 50).tolist())
    orc = res.oracles.set_index("routing")["accuracy"]
    assert orc["stable oracle"] <= orc["oracle"] <= orc["either-run oracle"]
    # Every other line of each present model's 11 files has no example in this category.
    skip = res.skipped.set_index(["stage", "model", "reason"])["rows"]
    assert skip[("import earlier", "claude-3-haiku-20240307", "no example for id")] == 1630 - 50
